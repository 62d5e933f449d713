package runner_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/testenv"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// A control plane that restarts finds its runc sandboxes again: a second Runner on the
// same state adopts the sandbox, and commands and files still work through it, on the
// same persistent workspace.
func TestAdoptRunningSandbox(t *testing.T) {
	testenv.RequireRoot(t)
	cfg := testenv.Config(t)
	first := runner.New(cfg, testenv.Logger(t))
	id := runner.NewID()
	sb, err := first.Create(tctx(t), runner.Spec{ID: id, Persistent: true, User: "carol", Main: []string{"sleep", "600"}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID != id || !strings.Contains(sb.Workspace, filepath.Join("carol", "sandboxes", id)) {
		t.Fatalf("sandbox %s at %s, want %s in carol/sandboxes", sb.ID, sb.Workspace, id)
	}
	if _, err := sb.Agent().Process().Execute(tctx(t), &pb.ExecuteRequest{Argv: []string{"sh", "-c", "echo kept > /workspace/f"}}); err != nil {
		t.Fatal(err)
	}
	sb.Agent().Close() // the old control plane is gone; the container is not

	second := runner.New(cfg, testenv.Logger(t))
	rec := runner.Record{ID: id, User: "carol", Tier: wire.TierContainer}
	got, err := second.Adopt(tctx(t), rec)
	if err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	res, err := got.Agent().Process().Execute(tctx(t), &pb.ExecuteRequest{Argv: []string{"cat", "/workspace/f"}})
	if err != nil || string(res.Stdout) != "kept\n" {
		t.Fatalf("exec in adopted sandbox: %q, %v", res.GetStdout(), err)
	}
	// The adopted sandbox knows the host ids its range gave its commands.
	wantUID, wantGID := sb.HostUser()
	if uid, gid := got.HostUser(); uid != wantUID || gid != wantGID || (cfg.UserNS() && uid < 1<<31) {
		t.Errorf("adopted sandbox's host user %d:%d, want %d:%d (from its own range)", uid, gid, wantUID, wantGID)
	}
	if err := got.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Destroyed: nothing to adopt, and the workspace survives until RemoveWorkspace.
	if _, err := second.Adopt(tctx(t), rec); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Adopt after Destroy: %v, want ErrNotFound", err)
	}
	if b, err := os.ReadFile(filepath.Join(got.Workspace, "f")); err != nil || string(b) != "kept\n" {
		t.Errorf("workspace after Destroy: %q, %v", b, err)
	}
	if err := second.RemoveWorkspace("carol", id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(got.Workspace); !os.IsNotExist(err) {
		t.Errorf("workspace still there after RemoveWorkspace: %v", err)
	}
}

// A sandbox that cannot be adopted (here: a process-tier one) is reaped: its processes
// and cgroup go, nothing is left running.
func TestReapUnadoptable(t *testing.T) {
	testenv.RequireRoot(t)
	cfg := testenv.Config(t)
	r := runner.New(cfg, testenv.Logger(t))
	id := runner.NewID()
	sb, err := r.Create(tctx(t), runner.Spec{ID: id, Persistent: true, User: "dave", Insecure: true, Main: []string{"sleep", "600"}})
	if err != nil {
		t.Fatal(err)
	}
	rec := runner.Record{ID: id, User: "dave", Tier: wire.TierProcess}
	if _, err := r.Adopt(tctx(t), rec); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("Adopt of a process-tier sandbox: %v, want ErrUnavailable", err)
	}
	if err := r.Reap(tctx(t), rec); err != nil {
		t.Fatalf("Reap: %v", err)
	}
	procs, _ := os.ReadFile("/sys/fs/cgroup/pids/paddock/" + id + "/cgroup.procs")
	if len(strings.TrimSpace(string(procs))) != 0 {
		t.Errorf("processes left after Reap: %q", procs)
	}
	_ = sb.Destroy(context.Background())
}

func TestBadSandboxIDs(t *testing.T) {
	r := testenv.Runner(t)
	for _, id := range []string{"../x", "sb-UPPERCASE1", "sb-short", "sb-abcdefghij/"} {
		if _, err := r.Create(context.Background(), runner.Spec{ID: id, User: "u", Main: []string{"true"}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ID %q: %v, want ErrInvalidArgument", id, err)
		}
	}
	if _, err := r.Create(context.Background(), runner.Spec{Persistent: true, User: "u", Main: []string{"true"}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("persistent without ID: %v", err)
	}
}

// A persistent sandbox started again gets the host id range it had (the one its history
// store belongs to), so that its store need not change hands at every start.
func TestRestartKeepsIDRange(t *testing.T) {
	testenv.RequireRoot(t)
	cfg := testenv.Config(t)
	if !cfg.UserNS() {
		t.Skip("user namespaces are off in this configuration")
	}
	r := runner.New(cfg, testenv.Logger(t))
	id := runner.NewID()
	var uids []uint32
	for range 2 {
		sb, err := r.Create(tctx(t), runner.Spec{ID: id, Persistent: true, User: "dave", Main: []string{"sleep", "600"}})
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := sb.HostUser()
		uids = append(uids, uid)
		if err := sb.Destroy(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if uids[0] != uids[1] || uids[0] < 1<<31 {
		t.Errorf("host uids across two starts: %v, want the same one, from a range", uids)
	}
	if err := r.RemoveWorkspace("dave", id); err != nil {
		t.Fatal(err)
	}
}
