package fleet

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	starts     *prometheus.CounterVec
	startTime  *prometheus.HistogramVec
	promotions prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paddock_sandbox_starts_total", Help: "Sandbox starts by tier and result (ok or error).",
		}, []string{"tier", "result"}),
		startTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "paddock_sandbox_start_seconds", Help: "Time to start a sandbox, by tier.",
			Buckets: []float64{.025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"tier"}),
		promotions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "paddock_promotions_total", Help: "Swaps of a user's live and dev sandboxes.",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.starts, m.startTime, m.promotions} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *metrics) observeStart(tier string, began time.Time, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.starts.WithLabelValues(tier, result).Inc()
	if err == nil {
		m.startTime.WithLabelValues(tier).Observe(time.Since(began).Seconds())
	}
}
