package runner_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/testenv"
	"github.com/paddockhq/paddock/internal/wire"
)

// TestFailedStartLeavesNoState: a start that fails after the sandbox's state directory is
// made (here runc is configured at a path that does not exist) removes that directory,
// and leaves a directory of the same ID that was there before alone.
func TestFailedStartLeavesNoState(t *testing.T) {
	testenv.RequireRoot(t)
	cfg := testenv.Config(t)
	cfg.Runc = "/nonexistent/runc"
	h := &harness{t: t, cfg: cfg, r: runner.New(cfg, testenv.Logger(t)), tier: wire.TierContainer, runtime: "runc"}
	spec := runner.Spec{User: "conf", Tier: wire.TierContainer, Runtime: "runc", Main: []string{"true"}, Limits: wire.Limits{Timeout: time.Minute}}
	if sb, err := h.r.Create(context.Background(), spec); !errors.Is(err, errdefs.ErrUnavailable) {
		if sb != nil {
			_ = sb.Destroy(context.Background())
		}
		t.Fatalf("create with a missing runc: %v, want unavailable", err)
	}
	h.assertNothingLeft()

	spec.ID = runner.NewID()
	before := filepath.Join(cfg.StateDir, "sandboxes", spec.ID)
	if err := os.MkdirAll(before, 0o711); err != nil {
		t.Fatal(err)
	}
	if _, err := h.r.Create(context.Background(), spec); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("create with a missing runc: %v, want unavailable", err)
	}
	if _, err := os.Stat(before); err != nil {
		t.Errorf("the state directory that was there before the failed start: %v", err)
	}
}
