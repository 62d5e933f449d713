//go:build kube

package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/testenv"
	"github.com/paddockhq/paddock/internal/wire"
)

// TestClusterAdopt: a second control plane with the same CA adopts a running cluster
// sandbox (the same pod: what the first wrote in /tmp is there); the first lets go of it
// without stopping it; a control plane with another CA cannot adopt it and leaves it as
// it was.
func TestClusterAdopt(t *testing.T) {
	r, cfg := onCluster(t)
	sb := createOn(t, r, runner.Spec{ID: runner.NewID(), User: "adopt", Persistent: true, Limits: wire.Limits{Memory: 256 << 20}})
	defer func() {
		if err := r.RemoveWorkspace("adopt", sb.ID); err != nil {
			t.Error(err)
		}
	}()
	execIn(t, sb, "sh", "-c", "echo first > /tmp/mark")
	rec := runner.Record{ID: sb.ID, User: "adopt", Tier: wire.TierContainer, Limits: sb.Limits}

	other := cfg
	other.Cluster.CADir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	if _, err := runner.New(other, testenv.Logger(t)).Adopt(ctx, rec); err == nil {
		t.Fatal("a control plane with another CA adopted the sandbox")
	}
	cancel()

	ctx, cancel = context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	second := runner.New(cfg, testenv.Logger(t))
	got, err := second.Adopt(ctx, rec)
	if err != nil {
		t.Fatalf("adopt: %v", err)
	}
	if got.Node == "" || got.Node != sb.Node {
		t.Errorf("adopted on node %q, want %q", got.Node, sb.Node)
	}
	if err := sb.Release(); err != nil {
		t.Fatalf("release: %v", err)
	}
	if out := execIn(t, got, "cat", "/tmp/mark"); out != "first\n" {
		t.Fatalf("adopted sandbox's /tmp/mark: %q, want what the first control plane wrote", out)
	}
	if err := got.Release(); err != nil {
		t.Fatal(err)
	}
}
