// Package testenv gives paddock's tests what they share: the binaries built from this
// checkout, and a runner configured under the test's own temporary directories.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/wire"
	"golang.org/x/sys/unix"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// moduleRoot is the checkout this package was compiled from.
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// build compiles paddock, paddock-server and paddock-agent (static) into a directory of this test
// process's own (test processes of several packages run at once), once per process. The
// directory's name carries the process's pid: a later process removes the directories of
// processes that are gone, since a test binary has no hook that runs when it exits.
func build() {
	sweepStale()
	if binDir, buildErr = os.MkdirTemp("", fmt.Sprintf("paddock-testbin-%d-", os.Getpid())); buildErr != nil {
		return
	}
	if buildErr = os.Chmod(binDir, 0o755); buildErr != nil { // the sandbox user execs the agent
		return
	}
	for _, b := range []struct{ name, pkg, cgo, tags string }{
		{"paddock-agent", "./cmd/paddock-agent", "0", "grpcnotrace"}, // as the Makefile builds it
		{"paddock", "./cmd/paddock", "0", "grpcnotrace"},
		{"paddock-server", "./cmd/paddock-server", "0", ""}, // found next to paddock
		{"paddock-exec", "./cmd/paddock-exec", "0", ""},     // found next to paddock-agent
	} {
		out := filepath.Join(binDir, b.name)
		cmd := exec.Command("go", "build", "-tags", b.tags, "-o", out, b.pkg)
		cmd.Dir = moduleRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+b.cgo)
		if msg, err := cmd.CombinedOutput(); err != nil {
			buildErr = &buildError{b.name, string(msg), err}
			return
		}
	}
}

// sweepStale removes the build directories of test processes that have exited (and any
// without a pid in its name, an hour after it was made).
func sweepStale() {
	old, _ := filepath.Glob(filepath.Join(os.TempDir(), "paddock-testbin-*"))
	for _, d := range old {
		if pid, ok := builderPID(filepath.Base(d)); ok {
			if errors.Is(unix.Kill(pid, 0), unix.ESRCH) { // its process is gone
				os.RemoveAll(d)
			}
			continue
		}
		if fi, err := os.Stat(d); err == nil && time.Since(fi.ModTime()) > time.Hour {
			os.RemoveAll(d)
		}
	}
}

// builderPID reads the pid from a build directory's name, paddock-testbin-<pid>-<random>.
func builderPID(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "paddock-testbin-")
	if !ok {
		return 0, false
	}
	digits, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(digits)
	return pid, err == nil && pid > 0
}

type buildError struct {
	name, out string
	err       error
}

func (e *buildError) Error() string { return "build " + e.name + ": " + e.err.Error() + "\n" + e.out }

// Binary returns the path of "paddock" or "paddock-agent" built from this checkout.
func Binary(t testing.TB, name string) string {
	t.Helper()
	buildOnce.Do(build)
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, name)
}

// RequireRoot fails the test when not run as root: sandboxes need it, and CI runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test creates sandboxes and needs root (CI runs as root); run it with sudo")
	}
}

// Config returns a runner configuration whose data and state live under a fresh temporary
// directory, with the agent built from this checkout.
func Config(t testing.TB) runner.Config {
	t.Helper()
	dir := shortTempDir(t)
	cfg := runner.DefaultConfig()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.Agent = Binary(t, "paddock-agent")
	// Tests start several sandboxes at once, each promised a sparse disk it barely writes;
	// the default reserve (5% of the file system) would make them fail on a test machine
	// whose disk is merely well used. TestDiskReserve sets a reserve of its own.
	cfg.DiskReserve = 2 << 30
	cfg, err := runner.LoadConfigFrom(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Last, once whatever ran on cfg has stopped (a `paddock serve` a test started leaves
	// its sandboxes running, as it does on a host): no sandbox outlives its test.
	t.Cleanup(func() { reapLeft(t, cfg) })
	return cfg
}

// reapLeft kills and removes the sandboxes still under cfg's state directory.
func reapLeft(t testing.TB, cfg runner.Config) {
	entries, _ := os.ReadDir(filepath.Join(cfg.StateDir, "sandboxes"))
	if len(entries) == 0 {
		return
	}
	r := runner.New(cfg, slog.New(slog.DiscardHandler))
	for _, e := range entries {
		if !runner.ValidID(e.Name()) {
			continue
		}
		t.Logf("testenv: sandbox %s outlived its test: reaped", e.Name())
		if err := r.Reap(context.Background(), runner.Record{ID: e.Name(), Tier: wire.TierContainer}); err != nil {
			t.Logf("testenv: reap sandbox %s: %v", e.Name(), err)
		}
	}
}

// shortTempDir is a temporary directory with a short path (Unix socket paths are capped at
// 108 bytes) that the unprivileged sandbox user can traverse.
func shortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pdk")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := runner.UnmountAll(dir); err != nil {
			t.Errorf("unmount the test's data directory: %v", err)
		}
		os.RemoveAll(dir)
	})
	return dir
}

// Runner returns a runner over Config(t) that logs through t.
func Runner(t testing.TB) *runner.Runner {
	t.Helper()
	return runner.New(Config(t), Logger(t))
}

// Logger returns a logger that writes through t.Log.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(LogWriter(t), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// LogWriter writes each line to the test's log. A line written once every test of the
// binary has ended is dropped: what writes it (an informer whose watch breaks as TestMain
// stops the test cluster, say) outlived the tests, and testing would panic on it.
func LogWriter(t testing.TB) io.Writer { return tWriter{t} }

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	defer func() {
		if r := recover(); r != nil {
			if s, ok := r.(string); !ok || !strings.Contains(s, " has completed") {
				panic(r)
			}
		}
	}()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

var _ io.Writer = tWriter{}
