package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/cgroups"
)

// TestExitedWhenTheSandboxDies: on every tier, a sandbox whose processes are killed from
// outside (the agent's, or the microVM's QEMU: whatever holds the sandbox) closes
// Exited, which is how the fleet notices an agent gone and starts the sandbox again.
func TestExitedWhenTheSandboxDies(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		if h.onCluster {
			t.Skip("a cluster sandbox's processes are in its pod's cgroup on its node, which the runner does not hold: TestClusterLostPod ends its pod from outside instead")
		}
		ctx := context.Background()
		sb, err := h.r.Create(ctx, h.spec("sleep", "600"))
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := sb.Destroy(ctx); err != nil {
				t.Errorf("destroy: %v", err)
			}
		}()
		exited := sb.Exited()
		if exited == nil {
			t.Fatal("Exited is nil: the fleet cannot tell when this tier's agent is gone")
		}
		select {
		case <-exited:
			t.Fatal("Exited is closed while the sandbox runs")
		default:
		}
		g, err := cgroups.Load(sb.Cgroup())
		if err != nil {
			t.Fatal(err)
		}
		kctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := g.Kill(kctx); err != nil {
			t.Fatalf("kill the sandbox's processes: %v", err)
		}
		select {
		case <-exited:
		case <-kctx.Done():
			t.Fatal("Exited still open after every process of the sandbox was killed")
		}
	})
}
