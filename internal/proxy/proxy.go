// Package proxy is the control plane's role-aware reverse proxy: every request to a user's
// apps host (package origins) goes, over HTTP or WebSocket, to the app of the sandbox that
// host names: the one that currently owns the user's role (live or dev), or one sandbox by
// ID. The control plane never answers those requests itself, so one sandbox owns the whole
// runtime of a host (ADR-0004).
//
// Promotion swaps a user's two role pointers. HTTP requests route once, at their start,
// and finish where they began. WebSockets outlive a swap, so the proxy terminates them,
// remembers the routing generation each was opened under, and closes the ones a swap left
// behind with [api.CloseOwnerChanged]; the client reconnects and reaches the new owner.
//
// Threat model: the sandbox app is untrusted code on an origin of its own. The proxy
// keeps the user's credentials out of its reach (paddock's cookies, Authorization, the
// CSRF token) and keeps it from planting them (a Set-Cookie that names a reserved cookie,
// in any spelling, is dropped: session fixation, cookie tossing). Client-sent X-Paddock-*
// and forwarding headers are dropped so that the app can trust the ones the proxy sets.
// Only WebSocket upgrades pass (an h2c upgrade would escape per-request checks), only from
// the host's own origin or a trusted one (cross-site WebSocket hijacking), and an app's 101
// to a plain request is refused.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// Target is where a user's role currently points.
type Target struct {
	SandboxID string
	// Role is api.RoleLive or api.RoleDev.
	Role string
	// Build is the sandbox's runtime build label, "" if unknown. A client that reports
	// another build is counted as a runtime mismatch.
	Build string
	// Dial opens a new byte stream to the sandbox's app (over the agent channel; in tests
	// any net.Conn). The proxy pools what it returns per sandbox.
	Dial func(ctx context.Context) (net.Conn, error)
}

// Router resolves the owner of a role. The generation increases on every swap of that
// user's roles; the proxy compares it with [Proxy.OwnerChanged]'s to find WebSockets a
// swap left behind. Errors should wrap errdefs sentinels: they are shown to the user.
type Router interface {
	Route(ctx context.Context, userID, role string) (t Target, generation int64, err error)
}

// SandboxRouter resolves one sandbox of a user, for the hosts that serve a sandbox by ID
// rather than by role. Target.Role is the role it holds now, "" for none. A Router that
// is also a SandboxRouter serves [Caller.SandboxID].
type SandboxRouter interface {
	RouteSandbox(ctx context.Context, userID, sandboxID string) (Target, error)
}

// Caller is who the server authenticated, and the role they chose.
type Caller struct {
	UserID string
	Role   string
	// SandboxID, when set, sends the request to that sandbox of the user's, whatever
	// role it holds; a promotion does not close its WebSockets.
	SandboxID string
}

// Options configure a [Proxy]. The zero value works.
type Options struct {
	// Registerer receives the proxy's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Log is where the proxy logs; nil uses slog.Default().
	Log *slog.Logger
	// ReservedCookies are the control plane's cookie names (session, role). The proxy
	// strips them from requests and drops any upstream Set-Cookie that names one.
	ReservedCookies []string
	// TrustedOrigins ("https://paddock.example.com") may open WebSockets besides the
	// request's own origin; list the public origin when a TLS proxy sits in front.
	TrustedOrigins []string
	// Event records events for the user's event log (a reconnect storm); nil drops them.
	Event func(ctx context.Context, userID, action string, detail map[string]any)
	// ReconnectWindow and ReconnectLimit bound a user's WebSocket connection attempts:
	// more than ReconnectLimit within ReconnectWindow is a reconnect storm and is refused
	// with 429. Defaults: 10 s and 20.
	ReconnectWindow time.Duration
	ReconnectLimit  int
	// Reconnects, when set, counts the attempts instead of the proxy's own memory: in a
	// store that several control-plane replicas share (store.ReconnectAttempt). When it
	// fails, the proxy counts in memory.
	Reconnects func(ctx context.Context, userID string, now time.Time, window time.Duration, limit int) (ok bool, retry time.Duration, report bool, err error)
	// MaxMessageBytes caps one WebSocket message in either direction; default 16 MiB.
	MaxMessageBytes int64
}

// Defaults for [Options].
const (
	DefaultReconnectWindow = 10 * time.Second
	DefaultReconnectLimit  = 20
	DefaultMaxMessageBytes = 16 << 20
)

// Proxy forwards a caller's requests to the sandbox that owns their role. Its methods
// are safe for concurrent use.
type Proxy struct {
	router   Router
	opts     Options
	log      *slog.Logger
	m        *metrics
	rp       *httputil.ReverseProxy
	tr       *http.Transport
	direct   *directTransport // plain requests without a body; tr for the rest
	reserved map[string]bool  // lower-cased names
	trusted  map[string]bool  // normalised origins
	dialers  sync.Map         // sandbox ID → func(ctx) (net.Conn, error)
	reg      *registry
	storms   *stormDetector
	ctx      context.Context // canceled by Close; bounds WebSocket relays
	cancel   context.CancelFunc
	closed   atomic.Bool

	// beforeRegister, when set (tests), runs between a WebSocket's Route and its
	// registration, to force a swap into that gap.
	beforeRegister func()
}

// New returns a Proxy that routes with r.
func New(r Router, o Options) (*Proxy, error) {
	if r == nil {
		return nil, fmt.Errorf("proxy: a Router is required: %w", errdefs.ErrInvalidArgument)
	}
	o = withDefaults(o)
	trusted, err := parseTrustedOrigins(o.TrustedOrigins)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	p := &Proxy{router: r, opts: o, log: o.Log, m: m, trusted: trusted, reserved: map[string]bool{}}
	for _, c := range o.ReservedCookies {
		p.reserved[canonicalCookieName(c)] = true
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.reg = newRegistry()
	p.storms = newStormDetector(o.ReconnectWindow, o.ReconnectLimit, time.Now)
	p.tr = p.newTransport()
	p.direct = newDirectTransport(p.dialSandbox, p.tr)
	p.rp = p.newReverseProxy()
	return p, nil
}

func withDefaults(o Options) Options {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.ReconnectWindow <= 0 {
		o.ReconnectWindow = DefaultReconnectWindow
	}
	if o.ReconnectLimit <= 0 {
		o.ReconnectLimit = DefaultReconnectLimit
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	return o
}

// Serve forwards r to the sandbox that owns c's role. The server calls it after
// authenticating c, for every path the control plane does not serve itself; whatever
// happens, the answer comes from that sandbox or is a JSON error, never a fallback.
func (p *Proxy) Serve(w http.ResponseWriter, r *http.Request, c Caller) {
	if err := p.check(r, c); err != nil {
		p.refuse(w, c.Role, err)
		return
	}
	up, err := upgradeOf(r.Header)
	if err != nil {
		p.refuse(w, c.Role, err)
		return
	}
	if up == "websocket" {
		if err := p.admitWebSocket(w, r, c); err != nil {
			p.refuse(w, c.Role, err)
			return
		}
	}
	info, gen, err := p.route(r, c)
	if err != nil {
		p.refuse(w, c.Role, err)
		return
	}
	if up == "websocket" {
		p.serveWebSocket(w, r, info, gen)
		return
	}
	p.serveHTTP(w, r, info)
}

// check refuses what no sandbox should see: a caller the server did not authenticate
// into a role, a proxy that is shutting down, and CONNECT (a tunnel, or HTTP/2's
// extended CONNECT, which would bypass the WebSocket termination).
func (p *Proxy) check(r *http.Request, c Caller) error {
	switch {
	case p.closed.Load():
		return fmt.Errorf("paddock is shutting down; retry shortly: %w", errdefs.ErrUnavailable)
	case c.UserID == "":
		return fmt.Errorf("proxy: no user: %w", errdefs.ErrUnauthenticated)
	case c.SandboxID == "" && c.Role != api.RoleLive && c.Role != api.RoleDev:
		return fmt.Errorf("role %q: want %s or %s: %w", errdefs.Clip(c.Role, 64), api.RoleLive, api.RoleDev, errdefs.ErrInvalidArgument)
	case r.Method == http.MethodConnect:
		return errMethod
	}
	return nil
}

var errMethod = errors.New("CONNECT is not allowed")

// reqInfo is what one request carries from Serve to the ReverseProxy hooks.
type reqInfo struct {
	caller      Caller
	target      Target
	clientBuild string
	mismatch    bool
}

type infoKey struct{}

func infoFrom(ctx context.Context) *reqInfo {
	i, _ := ctx.Value(infoKey{}).(*reqInfo)
	return i
}

// route asks the Router for the caller's owner, once, at the start of the request.
func (p *Proxy) route(r *http.Request, c Caller) (*reqInfo, int64, error) {
	if c.SandboxID != "" {
		return p.routeSandbox(r, c)
	}
	t, gen, err := p.router.Route(r.Context(), c.UserID, c.Role)
	if err != nil {
		return nil, 0, fmt.Errorf("the %s sandbox: %w", c.Role, err)
	}
	if !validSandboxID(t.SandboxID) || t.Dial == nil {
		return nil, 0, fmt.Errorf("router gave the %s role sandbox %q with no way to reach it: %w", c.Role, errdefs.Clip(t.SandboxID, 64), errdefs.ErrUnavailable)
	}
	t.Role = c.Role
	p.dialers.Store(t.SandboxID, t.Dial)
	info := &reqInfo{caller: c, target: t, clientBuild: clientBuild(r)}
	info.mismatch = p.checkMismatch(r.Context(), info)
	return info, gen, nil
}

// routeSandbox routes to c.SandboxID. Its generation is the newest there can be: a
// swap of roles does not move a sandbox's own host.
func (p *Proxy) routeSandbox(r *http.Request, c Caller) (*reqInfo, int64, error) {
	sr, ok := p.router.(SandboxRouter)
	if !ok {
		return nil, 0, fmt.Errorf("sandbox %s: this proxy routes by role only: %w", errdefs.Clip(c.SandboxID, 64), errdefs.ErrNotFound)
	}
	t, err := sr.RouteSandbox(r.Context(), c.UserID, c.SandboxID)
	if err != nil {
		return nil, 0, fmt.Errorf("sandbox %s: %w", errdefs.Clip(c.SandboxID, 64), err)
	}
	if t.SandboxID != c.SandboxID || t.Dial == nil {
		return nil, 0, fmt.Errorf("router gave sandbox %q for %q with no way to reach it: %w", errdefs.Clip(t.SandboxID, 64), errdefs.Clip(c.SandboxID, 64), errdefs.ErrUnavailable)
	}
	c.Role = t.Role
	p.dialers.Store(t.SandboxID, t.Dial)
	info := &reqInfo{caller: c, target: t, clientBuild: clientBuild(r)}
	info.mismatch = p.checkMismatch(r.Context(), info)
	return info, math.MaxInt64, nil
}

// retryAfter is the Retry-After, in seconds, of a 503 that a sandbox's start caused.
const retryAfter = "5"

// refuse answers err in the API's error shape and counts it.
func (p *Proxy) refuse(w http.ResponseWriter, role string, err error) {
	var status int
	switch {
	case errors.Is(err, errMethod):
		status = http.StatusMethodNotAllowed
		api.WriteErrorCode(w, status, api.CodeMethodNotAllowed, "the CONNECT method is not allowed")
	default:
		status, _ = api.StatusOf(err)
		if status == http.StatusServiceUnavailable {
			// The sandbox could not be reached or started (a wake that failed): try again.
			w.Header().Set("Retry-After", retryAfter)
		}
		api.WriteError(w, p.log, err)
	}
	p.m.request(role, status)
}

// OwnerChanged tells the proxy that userID's roles were swapped, to generation. It
// closes that user's WebSockets opened under older generations with
// [api.CloseOwnerChanged], so that their clients reconnect to the new owners; a
// WebSocket that routed before the swap but registers later is closed as it registers.
func (p *Proxy) OwnerChanged(userID string, generation int64) {
	for _, c := range p.reg.ownerChanged(userID, generation) {
		c.shutSoon(reasonOwnerChanged)
	}
}

// WebSockets counts the WebSockets open to sandboxID's app.
func (p *Proxy) WebSockets(sandboxID string) int {
	conns, _ := p.reg.sandboxGone(sandboxID)
	return len(conns)
}

// SandboxGone tells the proxy that a sandbox stopped or was deleted: its WebSockets
// close with [api.CloseOwnerGone] and its pooled connections are dropped.
func (p *Proxy) SandboxGone(sandboxID string) {
	p.dialers.Delete(sandboxID)
	p.direct.forget(sandboxID)
	conns, streams := p.reg.sandboxGone(sandboxID)
	for _, c := range conns {
		c.shutSoon(reasonOwnerGone)
	}
	for _, s := range streams {
		_ = s.Close()
	}
}

// Close closes every WebSocket (1001, going away) and pooled connection; Serve answers
// 503 from then on.
func (p *Proxy) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	conns, streams := p.reg.all()
	var wg sync.WaitGroup
	for _, c := range conns {
		if f := c.claim(shutCodes(reasonShutdown)); f != nil {
			wg.Go(f)
		}
	}
	wg.Wait()
	for _, s := range streams {
		_ = s.Close()
	}
	p.cancel()
	p.direct.CloseIdleConnections()
	return nil
}
