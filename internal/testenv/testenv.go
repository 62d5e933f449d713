// Package testenv gives paddock's tests what they share: the binaries built from this
// checkout, and a runner configured under the test's own temporary directories.
package testenv

import (
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/paddockhq/paddock/internal/runner"
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

// build compiles paddock and paddock-agent (static) into a shared directory, once per test
// process. Each binary is built to a temporary name and renamed into place, so test
// processes running in parallel never see a half-written binary.
func build() {
	binDir = filepath.Join(os.TempDir(), "paddock-testbin")
	if buildErr = os.MkdirAll(binDir, 0o755); buildErr != nil {
		return
	}
	for _, b := range []struct{ name, pkg, cgo string }{
		{"paddock-agent", "./cmd/paddock-agent", "0"},
		{"paddock", "./cmd/paddock", ""},
	} {
		tmp, err := os.CreateTemp(binDir, b.name+".*")
		if err != nil {
			buildErr = err
			return
		}
		tmp.Close()
		cmd := exec.Command("go", "build", "-o", tmp.Name(), b.pkg)
		cmd.Dir = moduleRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+b.cgo)
		if b.cgo == "" {
			cmd.Env = os.Environ()
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			os.Remove(tmp.Name())
			buildErr = &buildError{b.name, string(out), err}
			return
		}
		if buildErr = os.Chmod(tmp.Name(), 0o755); buildErr != nil {
			return
		}
		if buildErr = os.Rename(tmp.Name(), filepath.Join(binDir, b.name)); buildErr != nil {
			return
		}
	}
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
	cfg, err := runner.LoadConfigFrom(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
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
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Runner returns a runner over Config(t) that logs through t.
func Runner(t testing.TB) *runner.Runner {
	t.Helper()
	return runner.New(Config(t), Logger(t))
}

// Logger returns a logger that writes through t.Log.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

var _ io.Writer = tWriter{}
