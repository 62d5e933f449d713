package fleet

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paddockhq/paddock/internal/runner"
)

// A taken member's refill waits for the claimed sandbox's first command to end, once; a
// take that finds nothing asks for a refill at once.
func TestPoolRefillAfterFirstCommand(t *testing.T) {
	p := &pool{
		idle: []*runner.Sandbox{{ID: "sb-aaaaaaaaaa"}}, claimed: map[string]*time.Timer{}, grace: time.Hour,
		wake: make(chan struct{}, 1), gauge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"}),
	}
	woken := func() bool {
		select {
		case <-p.wake:
			return true
		default:
			return false
		}
	}
	sb := p.take()
	if sb == nil || woken() {
		t.Fatalf("take gave %v, or asked for a refill at once", sb)
	}
	p.used("sb-bbbbbbbbbb") // another sandbox's command
	if woken() {
		t.Fatal("another sandbox's command started the refill")
	}
	p.used(sb.ID)
	if !woken() {
		t.Fatal("the claimed sandbox's first command ended and no refill was asked for")
	}
	p.used(sb.ID)
	if woken() {
		t.Fatal("a second command asked for a refill again")
	}
	if p.take() != nil || !woken() {
		t.Fatal("a take from an empty pool did not ask for a refill")
	}
}
