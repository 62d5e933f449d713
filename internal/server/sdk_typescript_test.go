package server_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/servertest"
)

// The TypeScript SDK (sdk/typescript) against a real control plane: it is built with its
// pinned TypeScript, then its tests run under Node's test runner with a user's API token.
// Its packages are installed by make setup (npm ci in sdk/typescript).
func TestTypeScriptSDK(t *testing.T) {
	dir, err := filepath.Abs("../../sdk/typescript")
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed: run make setup")
	}
	tsc := filepath.Join(dir, "node_modules", ".bin", "tsc")
	if _, err := os.Stat(tsc); err != nil {
		t.Fatalf("%s is missing: run make setup (npm ci in sdk/typescript)", tsc)
	}
	e := servertest.Start(t)
	user := e.Register(t, "sdk")
	runNode(t, dir, nil, tsc, "-p", ".")
	out := runNode(t, dir, []string{"PADDOCK_URL=" + e.URL, "PADDOCK_TOKEN=" + user.Token},
		node, "--test", "--test-reporter=spec", "test/")
	t.Log(out)
}

// runNode runs a Node program in dir and returns its output; a failure fails the test
// with it. The bound is generous: the tests make and stop sandboxes.
func runNode(t *testing.T, dir string, env []string, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "NO_COLOR=1"), env...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", filepath.Base(bin), args, err, out)
	}
	return string(out)
}
