package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/policy"
)

// stepMessage begins the message of a provider step's transaction: "paddock app build".
const stepMessage = "paddock app "

// stepRuns is the provider steps this process runs, one per sandbox at a time, and the
// hosts each lets its sandbox reach. With when the process started, it tells a step's
// transaction still under way from one its control plane left open when it died
// (SIGKILLed, its host lost), which the next step rolls back.
type stepRuns struct {
	mu      sync.Mutex
	running map[string]stepRun // by sandbox
}

// stepRun is a step under way: while it runs, its sandbox reaches its provider's
// registries alone.
type stepRun struct {
	step, runtime string
	registries    []string
}

// start records run in sandbox id; false when a step already runs there.
func (r *stepRuns) start(id string, run stepRun) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.running[id]; ok {
		return false
	}
	if r.running == nil {
		r.running = map[string]stepRun{}
	}
	r.running[id] = run
	return true
}

func (r *stepRuns) done(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.running, id)
}

// of is the step running in sandbox id, if one is.
func (r *stepRuns) of(id string) (stepRun, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	run, ok := r.running[id]
	return run, ok
}

// narrow is d for a host of a sandbox where run is under way: refused unless the host is
// one of run's registries.
func (run stepRun) narrow(host string, d policy.Decision) policy.Decision {
	if !d.Allow || slices.Contains(run.registries, host) {
		return d
	}
	reach := "no host"
	if len(run.registries) > 0 {
		reach = "only its registries (" + strings.Join(run.registries, ", ") + ")"
	}
	return policy.Decision{Rule: "provider step",
		Reason: fmt.Sprintf("while the %s provider's %s step runs, the sandbox reaches %s", run.runtime, run.step, reach)}
}

// abandonedStep is the provider step's transaction open in sandbox id that no control
// plane runs any more, if there is one; the caller holds the sandbox's step (stepRuns), so
// it is not this process's. A transaction the user began is never one. With replicas, a
// step begun after a live replica other than this one started may be that replica's, and
// is left alone.
func (s *Server) abandonedStep(ctx context.Context, c fleet.Caller, id string) (*api.Transaction, error) {
	h, err := s.ops.History(ctx, c, id)
	if err != nil || h.Transaction == nil || !strings.HasPrefix(h.Transaction.Message, stepMessage) {
		return nil, err
	}
	tx := h.Transaction
	if s.cluster == nil {
		return tx, nil // one control plane, and it is not running it
	}
	replicas, err := s.st.Replicas(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range replicas {
		alive := time.Since(r.HeartbeatAt) <= s.cluster.ttl
		if r.ID != s.cluster.id && alive && !r.StartedAt.After(tx.Time) {
			return nil, nil
		}
	}
	return tx, nil
}

// describeAbandoned says what became of tx, rolled back by the next step.
func describeAbandoned(tx *api.Transaction) string {
	return fmt.Sprintf("the %s begun at %s did not finish (its control plane stopped): the workspace was put back as it was before it",
		strings.TrimPrefix(tx.Message, "paddock app "), tx.Time.UTC().Format(time.RFC3339))
}
