package runner_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/testenv"
	"github.com/paddockhq/paddock/internal/wire"
)

// A workspace on a filesystem that cannot be idmapped (procfs here) fails the sandbox's
// start with runc's reason and the way out.
func TestWorkspaceThatCannotBeIdmapped(t *testing.T) {
	testenv.RequireRoot(t)
	cfg := testenv.Config(t)
	if !cfg.UserNS() {
		t.Skip("user namespaces are off in this configuration")
	}
	r := runner.New(cfg, testenv.Logger(t))
	sb, err := r.Create(tctx(t), runner.Spec{User: "erin", Tier: wire.TierContainer, Workspace: "/proc/sys/fs", Main: []string{"true"}})
	if err == nil {
		sb.Destroy(tctx(t))
		t.Fatal("a sandbox started with a procfs workspace under a user namespace")
	}
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "MOUNT_ATTR_IDMAP") || !strings.Contains(err.Error(), "user_namespace: false") {
		t.Errorf("got %v, want runc's reason and the way out (user_namespace: false)", err)
	}
}

// A workspace of the host's root that others may not enter (mktemp -d as root) is refused
// at the start, saying what to do, instead of a command that cannot start in it
// ("fork/exec /usr/bin/sh: permission denied", exit 126). The same directory made
// enterable works.
func TestRootPrivateWorkspace(t *testing.T) {
	testenv.RequireRoot(t)
	r := runner.New(testenv.Config(t), testenv.Logger(t))
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	spec := runner.Spec{User: "erin", Tier: wire.TierContainer, Workspace: dir, Main: []string{"ls", "/workspace"}}
	_, err := r.Run(tctx(t), spec, runner.Stdio{}, false)
	if !errors.Is(err, errdefs.ErrPermissionDenied) || !strings.Contains(err.Error(), "chown -R 1000:1000 "+dir) {
		t.Fatalf("a root 0700 workspace: %v, want refused at the start with the chown that fixes it", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if res, err := r.Run(tctx(t), spec, runner.Stdio{}, false); err != nil || res.ExitCode() != 0 {
		t.Fatalf("CONTROL FAILED: a root 0755 workspace: %+v, %v", res, err)
	}
}
