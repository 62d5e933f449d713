package gateway

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paddockhq/paddock/internal/httpmetrics"
)

// metrics are the gateway's telemetry. Label values are bounded: providers are the
// configured names or "unknown"; codes are HTTP statuses; directions are input and output.
// Users and sandboxes are not labels (unbounded); per-user accounting goes to the Ledger
// and the Usage sink.
type metrics struct {
	requests *prometheus.CounterVec
	tokens   *prometheus.CounterVec
	duration *prometheus.HistogramVec
	upstream *prometheus.HistogramVec
}

// unknownProvider labels requests for a provider that is not configured.
const unknownProvider = "unknown"

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paddock_gateway_requests_total",
			Help: "Requests from sandboxes to the provider gateway, by provider and the HTTP status the sandbox got.",
		}, []string{"provider", "code"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paddock_gateway_tokens_total",
			Help: "Tokens the providers reported using for sandboxes' requests, by provider and direction (input, output).",
		}, []string{"provider", "direction"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "paddock_gateway_request_duration_seconds",
			Help:    "Time to serve one request through the gateway, streamed answer included.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}, []string{"provider"}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "paddock_gateway_upstream_header_seconds",
			Help:    "Time from forwarding a request to the provider's response headers (for a stream, about its time to first token).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"provider"}),
	}
	if err := httpmetrics.Register(reg, "gateway", m.requests, m.tokens, m.duration, m.upstream); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *metrics) request(provider string, status int) {
	m.requests.WithLabelValues(provider, strconv.Itoa(status)).Inc()
}

func (m *metrics) used(provider string, t tokens) {
	if t.in > 0 {
		m.tokens.WithLabelValues(provider, "input").Add(float64(t.in))
	}
	if t.out > 0 {
		m.tokens.WithLabelValues(provider, "output").Add(float64(t.out))
	}
}
