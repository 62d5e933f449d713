package proxy

import (
	"context"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/httpmetrics"
)

// metrics are the proxy's telemetry. Label values are bounded: roles are live, dev or
// "other"; codes are HTTP statuses; close reasons are the reason* constants.
type metrics struct {
	requests       *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	upstreamErrors *prometheus.CounterVec
	websockets     *prometheus.GaugeVec
	wsCloses       *prometheus.CounterVec
	mismatch       *prometheus.CounterVec
	storms         prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paddock_proxy_requests_total",
			Help: "Requests proxied to sandboxes, by role and HTTP status (101 for WebSockets).",
		}, []string{"role", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "paddock_proxy_request_duration_seconds",
			Help:    "Time to proxy one HTTP request, body included.",
			Buckets: prometheus.DefBuckets,
		}, []string{"role"}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paddock_proxy_upstream_errors_total",
			Help: "Requests and WebSocket dials that the owning sandbox did not answer.",
		}, []string{"role"}),
		websockets: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "paddock_proxy_websockets",
			Help: "WebSockets open through the proxy.",
		}, []string{"role"}),
		wsCloses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paddock_proxy_websocket_closes_total",
			Help: "Proxied WebSockets closed, by why.",
		}, []string{"reason"}),
		mismatch: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paddock_runtime_mismatch_total",
			Help: "Requests whose client build differs from the serving sandbox's runtime build.",
		}, []string{"role"}),
		storms: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "paddock_proxy_reconnect_storms_total",
			Help: "Reconnect storms: a user's WebSocket attempts over the limit within the window, counted once per window.",
		}),
	}
	if err := httpmetrics.Register(reg, "proxy", m.requests, m.duration, m.upstreamErrors, m.websockets, m.wsCloses, m.mismatch, m.storms); err != nil {
		return nil, err
	}
	return m, nil
}

func roleLabel(role string) string {
	if role == api.RoleLive || role == api.RoleDev {
		return role
	}
	return "other"
}

func (m *metrics) request(role string, status int) {
	m.requests.WithLabelValues(roleLabel(role), strconv.Itoa(status)).Inc()
}

// checkMismatch compares the client's build with the owner's. A mismatch means the
// client runs code from another runtime than the one answering it: after a promotion,
// or a half-deployed build. It is counted, logged, and flagged on the response so that
// the client can reload.
func (p *Proxy) checkMismatch(ctx context.Context, info *reqInfo) bool {
	if info.clientBuild == "" || info.target.Build == "" || info.clientBuild == info.target.Build {
		return false
	}
	p.m.mismatch.WithLabelValues(roleLabel(info.caller.Role)).Inc()
	p.log.InfoContext(ctx, "proxy: runtime mismatch", "user", info.caller.UserID, "role", info.caller.Role,
		"sandbox", info.target.SandboxID, "client_build", info.clientBuild, "sandbox_build", info.target.Build)
	return true
}
