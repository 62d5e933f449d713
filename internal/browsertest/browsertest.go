// Package browsertest runs the browser scripts in tests/browser (Node with
// playwright-core driving Debian's chromium) from Go tests, so that the pages are
// tested the way people use them: real forms, real redirects, real cookies.
//
// What it needs is installed by `make setup` (scripts/setup.sh): the chromium
// package and tests/browser/node_modules. When either is missing the test fails,
// rather than skips, so a machine that cannot run browser tests never passes them
// by accident.
package browsertest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Chromium is the browser the scripts launch (Debian's chromium package).
const Chromium = "/usr/bin/chromium"

// timeout bounds how long one script may go without printing a line: a script
// prints each step it finishes, so a slow machine gets more time while a wedged
// browser still cannot hang the test binary.
const timeout = 2 * time.Minute

// ceiling bounds a whole script, as a multiple of its silence bound.
const ceiling = 5

// Run runs tests/browser/<script>.mjs with node, with env added to the test
// process's environment (BASE_URL and whatever else the script reads; CHROMIUM is
// set to the browser's path unless env sets it), and returns its combined output.
// A non-zero exit fails the test with that output.
func Run(t *testing.T, script string, env map[string]string) string {
	t.Helper()
	return RunFor(t, script, env, timeout)
}

// RunFor is Run with its own bound on the script's silence, for one that waits on
// sandboxes being made, stopped and started.
func RunFor(t *testing.T, script string, env map[string]string, timeout time.Duration) string {
	t.Helper()
	dir, err := scriptDir()
	if err != nil {
		t.Fatalf("browsertest: %v", err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("browsertest: node is not installed: run make setup")
	}
	if _, err := os.Stat(Chromium); err != nil {
		t.Fatalf("browsertest: %s is missing: run make setup", Chromium)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core", "package.json")); err != nil {
		t.Fatalf("browsertest: %s/node_modules lacks playwright-core: run make setup", dir)
	}
	path := filepath.Join(dir, script+".mjs")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("browsertest: no script %s", path)
	}
	ctx, cancel := context.WithTimeout(t.Context(), ceiling*timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, path)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CHROMIUM="+Chromium)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out := &progressBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 5 * time.Second
	silent := time.AfterFunc(timeout, cancel)
	out.progress = func() { silent.Reset(timeout) }
	err = cmd.Run()
	silent.Stop()
	if ctx.Err() != nil {
		t.Fatalf("browsertest: %s.mjs printed nothing for %s (or ran past %s); output:\n%s", script, timeout, ceiling*timeout, out)
	}
	if err != nil {
		t.Fatalf("browsertest: %s.mjs: %v; output:\n%s", script, err, out)
	}
	return out.String()
}

// scriptDir finds tests/browser by walking up from the working directory (a Go
// test runs in its package's directory) to the module root.
func scriptDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/paddockhq/paddock\n") {
			return filepath.Join(dir, "tests", "browser"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the paddock module: cannot find tests/browser")
		}
		dir = parent
	}
}

// progressBuffer keeps a script's output and calls progress on each write.
type progressBuffer struct {
	mu       sync.Mutex
	buf      bytes.Buffer
	progress func()
}

func (b *progressBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.progress != nil {
		b.progress()
	}
	return b.buf.Write(p)
}

func (b *progressBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
