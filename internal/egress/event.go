package egress

import (
	"context"
	"log/slog"
	"net/netip"
	"time"

	"github.com/paddockhq/paddock/internal/policy"
)

// Stage is where in its life an exchange (a tunnel, or one plain HTTP request) was when an
// [Event] was recorded.
type Stage string

const (
	// StageDenied: the request was refused — by the policy, or by the proxy's own checks
	// of the request, the port, the addresses or the ClientHello. Nothing was forwarded.
	StageDenied Stage = "denied"
	// StageFailed: the host was allowed but could not be reached (resolution or connection
	// failed, or the client gave up before the tunnel was checked).
	StageFailed Stage = "failed"
	// StageOpened: the exchange was allowed and is connected to Addr.
	StageOpened Stage = "opened"
	// StageClosed: an opened exchange ended; BytesOut, BytesIn and Duration are set.
	StageClosed Stage = "closed"
)

// Event is one record of the proxy's audit trail. Every request gives one event
// (denied, failed or opened), and every opened exchange one more when it closes, with the
// same ID.
type Event struct {
	// ID numbers the proxy's exchanges: an exchange's opened and closed events share it.
	ID   uint64
	Time time.Time
	// Sandbox is the ID of the sandbox whose listener the request arrived on.
	Sandbox string
	Stage   Stage
	// Method is CONNECT or the plain HTTP request's method.
	Method string
	// Host and Port are the request's target: the name as decided (lower-cased), or an
	// IP literal's address. Host is "" when the request was too malformed to have one.
	Host string
	Port uint16
	// Decision is the outcome: the Decider's when it decided, or the proxy's own refusal,
	// whose Rule starts with "egress." (egress.request, egress.host, egress.port,
	// egress.capability, egress.address, egress.resolve, egress.dial, egress.tls).
	Decision policy.Decision
	// Status is the HTTP status the sandbox was given (200 for a tunnel); in a plain HTTP
	// exchange's closed event, the upstream's.
	Status int
	// Addr is the address connected to, or the one refused.
	Addr netip.AddrPort
	// ServerName is the TLS server name the tunnel's ClientHello asked for.
	ServerName string
	// Capability is the ID of the capability token the request carried and that allowed
	// it (never the token).
	Capability string
	// BytesOut (sandbox to upstream) and BytesIn (upstream to sandbox) count bodies and
	// tunnelled bytes, not the proxy's own request and response heads.
	BytesOut, BytesIn int64
	Duration          time.Duration
}

// Decision label values of paddock_egress_requests_total.
func (e *Event) decisionLabel() string {
	switch e.Stage {
	case StageOpened, StageClosed:
		return "allow"
	case StageFailed:
		return "error"
	}
	return "deny"
}

// record logs e, counts it and hands it to the audit sink.
func (p *Proxy) record(ctx context.Context, e Event) {
	e.Time = time.Now()
	switch e.Stage {
	case StageOpened:
		p.m.allow.Inc()
	case StageFailed:
		p.m.fail.Inc()
	case StageDenied:
		p.m.deny.Inc()
	}
	level := slog.LevelInfo
	if e.Stage == StageDenied {
		level = slog.LevelWarn
	}
	if p.log.Enabled(ctx, level) {
		attrs := []slog.Attr{
			slog.String("sandbox", e.Sandbox), slog.Uint64("id", e.ID),
			slog.String("method", e.Method), slog.String("host", e.Host), slog.Int("port", int(e.Port)),
			slog.String("decision", e.decisionLabel()), slog.String("rule", e.Decision.Rule),
			slog.String("reason", e.Decision.Reason), slog.Int("status", e.Status),
		}
		if e.Addr.IsValid() {
			attrs = append(attrs, slog.String("addr", e.Addr.String()))
		}
		if e.ServerName != "" {
			attrs = append(attrs, slog.String("sni", e.ServerName))
		}
		if e.Stage == StageClosed {
			attrs = append(attrs, slog.Int64("bytes_out", e.BytesOut), slog.Int64("bytes_in", e.BytesIn),
				slog.Duration("duration", e.Duration))
		}
		p.log.LogAttrs(ctx, level, "egress: "+string(e.Stage), attrs...)
	}
	if p.audit != nil {
		p.audit(context.WithoutCancel(ctx), e)
	}
}
