package egress

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the proxy's telemetry. Label values are bounded: decisions are allow, deny
// and error; directions are out (sandbox to upstream) and in. Sandboxes and hosts are not
// labels (unbounded); per-sandbox detail goes to the log and the audit sink.
type metrics struct {
	requests *prometheus.CounterVec
	bytes    *prometheus.CounterVec
	open     prometheus.Gauge

	allow, deny, fail prometheus.Counter
	out, in           prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "paddock_egress_requests_total",
		Help: "Requests from sandboxes to the egress proxy, by decision: allow (connected), deny (refused by policy, address, port or parse), error (allowed, but the upstream could not be reached).",
	}, []string{"decision"})
	bytes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "paddock_egress_bytes_total",
		Help: "Bytes carried by the egress proxy, by direction: out (sandbox to upstream) and in (upstream to sandbox).",
	}, []string{"direction"})
	open := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "paddock_egress_open_exchanges",
		Help: "Tunnels and plain HTTP exchanges the egress proxy has open to upstreams.",
	})
	var err error
	if reg != nil {
		// Several proxies may share a registry (one per tier, or a test's): the second
		// one counts into the first one's collectors.
		requests, err = register(reg, requests)
		if err == nil {
			bytes, err = register(reg, bytes)
		}
		if err == nil {
			open, err = register(reg, open)
		}
	}
	m := &metrics{requests: requests, bytes: bytes, open: open,
		allow: requests.WithLabelValues("allow"), deny: requests.WithLabelValues("deny"),
		fail: requests.WithLabelValues("error"),
		out:  bytes.WithLabelValues("out"), in: bytes.WithLabelValues("in")}
	return m, err
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}
