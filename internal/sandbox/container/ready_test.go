package container_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandbox/agentclient"
	"github.com/paddockhq/paddock/internal/sandbox/container"
	"github.com/paddockhq/paddock/internal/testenv"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// readyRuntime is runc as the runner drives it, with its state under the test's directory.
func readyRuntime(t *testing.T) (*container.Runtime, runner.Config) {
	t.Helper()
	testenv.RequireRoot(t)
	cfg := testenv.Config(t)
	bin := filepath.Join(runner.InstallPrefix, "bin", "runc")
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("runc"); err != nil {
			t.Fatal("runc is not installed (scripts/setup.sh installs it)")
		}
	}
	return container.Runc(bin, filepath.Join(cfg.StateDir, "runc"), testenv.Logger(t)), cfg
}

// readyConfig is a container whose workspace does not exist until ready makes it.
func readyConfig(t *testing.T, cfg runner.Config, ready func(c container.Config) error) container.Config {
	t.Helper()
	id := runner.NewID()
	dir := filepath.Join(cfg.StateDir, "sandboxes", id)
	if err := os.MkdirAll(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	for d := dir; d != filepath.Dir(cfg.StateDir); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	c := container.Config{
		ID: id, Dir: dir, Workspace: filepath.Join(filepath.Dir(cfg.StateDir), "ws-"+id), Agent: cfg.Agent,
		UID: cfg.SandboxUID, GID: cfg.SandboxGID, Env: []string{"PATH=/usr/bin:/bin"},
		Limits: cfg.Limits, UserNS: cfg.UserNS(), OwnWorkspace: true,
	}
	c.Ready = func() error { return ready(c) }
	return c
}

// TestStartWaitsForReady: Start writes the bundle's rootfs before it waits for
// Config.Ready (that is what it overlaps with the caller's work), and binds the workspace
// only after: a workspace that Ready makes is the one the sandbox sees.
func TestStartWaitsForReady(t *testing.T) {
	rt, cfg := readyRuntime(t)
	var rootfsFirst error
	c := readyConfig(t, cfg, func(c container.Config) error {
		if _, err := os.Stat(filepath.Join(c.Dir, "bundle", "rootfs", "etc", "passwd")); err != nil {
			rootfsFirst = fmt.Errorf("the bundle's rootfs was not written before Ready: %w", err)
		}
		if err := os.Mkdir(c.Workspace, 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(c.Workspace, "marker"), []byte("made by Ready\n"), 0o644)
	})
	t.Cleanup(func() { os.RemoveAll(c.Workspace) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := rt.Start(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	if rootfsFirst != nil {
		t.Error(rootfsFirst)
	}
	res, err := agentclient.New(sb.Conn()).Process().Execute(ctx, &pb.ExecuteRequest{Argv: []string{"cat", "/workspace/marker"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(res.GetStdout()); got != "made by Ready\n" || res.GetStatus().GetExitCode() != 0 {
		t.Errorf("cat /workspace/marker: %q %+v (stderr %q), want what Ready wrote", got, res.GetStatus(), res.GetStderr())
	}
}

// TestStartReadyFails: an error from Ready ends the start with that error, and leaves no
// container, state directory or cgroup behind.
func TestStartReadyFails(t *testing.T) {
	rt, cfg := readyRuntime(t)
	refused := fmt.Errorf("disk: no room: %w", errdefs.ErrLimitExceeded)
	c := readyConfig(t, cfg, func(container.Config) error { return refused })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := rt.Start(ctx, c)
	if err == nil {
		sb.Destroy(context.Background())
		t.Fatal("Start succeeded although Ready failed")
	}
	if !errors.Is(err, errdefs.ErrLimitExceeded) || !strings.Contains(err.Error(), "no room") {
		t.Errorf("Start: %v, want Ready's error", err)
	}
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Errorf("the sandbox's state directory outlived a failed start: %v", err)
	}
	if out, err := exec.Command(rt.Binary, "--root", rt.StateDir, "state", c.ID).CombinedOutput(); err == nil {
		t.Errorf("runc still has the container: %s", out)
	}
	for _, h := range []string{"freezer", "pids", "memory", "unified"} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", h, "paddock", c.ID)); err == nil {
			t.Errorf("the sandbox's %s cgroup outlived a failed start", h)
		}
	}
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", "paddock", c.ID)); err == nil {
		t.Error("the sandbox's cgroup outlived a failed start")
	}
}
