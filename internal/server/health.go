package server

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/httpmetrics"
)

// healthCache keeps the runner's check for a few seconds: it may run the OCI runtime, and
// /healthz is polled.
type healthCache struct {
	mu     sync.Mutex
	at     time.Time
	runner error
}

const healthTTL = 5 * time.Second

// healthz answers 200 when the store answers and the runner can start sandboxes, and 503
// naming what is wrong otherwise.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	h := api.Health{Status: "ok", Checks: map[string]string{"store": "ok", "runner": "ok"}}
	if err := s.st.Ping(ctx); err != nil {
		h.Status, h.Checks["store"] = "unavailable", err.Error()
	}
	if err := s.runnerHealth(); err != nil {
		h.Status, h.Checks["runner"] = "unavailable", err.Error()
	}
	status := http.StatusOK
	if h.Status != "ok" {
		status = http.StatusServiceUnavailable
	}
	api.WriteJSON(w, status, h)
}

func (s *Server) runnerHealth() error {
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	if time.Since(s.health.at) > healthTTL {
		s.health.runner, s.health.at = s.runner.Check(), time.Now()
	}
	return s.health.runner
}

func (s *Server) fleetDenied(what string) error {
	return fmt.Errorf("%s: only admins may: %w", what, errdefs.ErrPermissionDenied)
}

type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	// forwarded counts requests sent on to the replica that runs their sandbox.
	forwarded *prometheus.CounterVec
	// handedOut and handedIn count client connections handed on to the replica that runs
	// their sandbox (handon.go), and taken from another.
	handedOut, handedIn *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, f *fleet.Fleet) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paddock_http_requests_total", Help: "Requests to the control plane's own routes, by route and status.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "paddock_http_request_duration_seconds", Help: "Latency of the control plane's own routes.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route"}),
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paddock_replica_forwarded_total", Help: "Requests forwarded to the replica that runs their sandbox, by replica.",
		}, []string{"replica"}),
		handedOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paddock_replica_handed_on_total", Help: "Client connections handed on to the replica that runs their sandbox, by replica.",
		}, []string{"replica"}),
		handedIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paddock_replica_taken_on_total", Help: "Client connections taken on from another replica, by that replica.",
		}, []string{"replica"}),
	}
	running := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "paddock_sandboxes_running", Help: "Sandboxes running under this control plane.",
	}, func() float64 { return float64(f.Running()) })
	if err := httpmetrics.Register(reg, "server", m.requests, m.latency, m.forwarded, m.handedOut, m.handedIn, running); err != nil {
		return nil, err
	}
	return m, nil
}
