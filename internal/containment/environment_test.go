package containment

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/capability"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// TestEnvironment: nothing of the host's environment reaches the sandbox. The test
// process carries a random canary variable (set in TestMain, before any runc or agent
// process started); it must appear nowhere inside: not in the sandbox's environment, not in
// any /proc/<pid>/environ or cmdline it can read, not in any file under the trees it can
// write or that paddock made for it. A marker passed the proper way (Spec.Env, a workspace
// file) is found by the very same probes.
func TestEnvironment(t *testing.T) {
	if got := os.Getenv(hostCanaryName); got != hostCanaryValue {
		t.Fatalf("CONTROL FAILED: the host canary is not in the test's environment")
	}
	// os.Setenv does not rewrite the test process's own /proc/self/environ, but every
	// process it starts (runc among them) inherits the variable: a plain child shows it.
	child, err := exec.Command("cat", "/proc/self/environ").Output()
	if err != nil || !strings.Contains(string(child), hostCanaryValue) {
		t.Fatalf("CONTROL FAILED: a host child process's /proc/self/environ does not show the canary (%v)", err)
	}

	h := newHarness(t)
	visible := "visible-" + randHex(12)
	// The agent's capability keys come in its envelope; its commands must not find them
	// (they would mint tokens the agent accepts).
	caps, err := capability.NewKeyring(1, map[uint32]capability.RootKey{1: capability.NewRootKey()})
	if err != nil {
		t.Fatal(err)
	}
	b := h.newBox(t, boxOpts{env: []string{"PADDOCK_VISIBLE=" + visible}, capabilities: caps})
	agentKey := agentKeyOf(t, caps, b.sb.ID)
	if err := os.WriteFile(filepath.Join(b.ws, "marker.txt"), []byte(visible), 0o644); err != nil {
		t.Fatal(err)
	}
	// A second session, so the sandbox holds more than the agent and the probe.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := b.pc.Start(ctx, &pb.StartRequest{Argv: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}

	trees := []string{"/etc", "/tmp", "/workspace", "/run", "/.paddock", "/home", "/root", "/var"}
	grep := func(needle string) []string { return append([]string{mask(needle)}, trees...) }
	checks := []check{
		{p: probe{Name: "env", Op: "sh", Args: []string{"env"}}, want: func(t *testing.T, r result) {
			outContains("PADDOCK_VISIBLE="+visible)(t, r)
			notShown(hostCanaryValue, hostCanaryName)(t, r)
		}},
		{p: probe{Name: "scan /proc/*/environ and cmdline for the host canary", Op: "scan-proc", Args: []string{mask(hostCanaryValue)}}, want: denied(), host: same(probe{Op: "scan-proc", Args: []string{mask(hostCanaryValue)}})},
		{p: probe{Name: "scan /proc/*/environ and cmdline for the canary's name", Op: "scan-proc", Args: []string{mask(hostCanaryName)}}, want: denied()},
		{p: probe{Name: "scan /proc/*/environ and cmdline for the visible marker (control)", Op: "scan-proc", Args: []string{mask(visible)}}, want: allowed},
		{p: probe{Name: "search the sandbox's files for the host canary", Op: "grep-tree", Args: grep(hostCanaryValue)}, want: denied()},
		{p: probe{Name: "search the sandbox's files for the visible marker (control)", Op: "grep-tree", Args: grep(visible)}, want: outContains("/workspace/marker.txt")},
		{p: probe{Name: "scan /proc/*/environ and cmdline for the agent's capability key", Op: "scan-proc", Args: []string{mask(agentKey)}}, want: denied()},
		{p: probe{Name: "search the sandbox's files for the agent's capability key", Op: "grep-tree", Args: grep(agentKey)}, want: denied()},
	}
	runChecks(t, b, checks)

	t.Run("environ of every sandbox process, read from the host", func(t *testing.T) {
		// The agent's environ is unreadable from inside (it is not dumpable); the host can
		// read every process's, and none may carry the canary.
		pids := sandboxProcs(t, b.sb.Cgroup())
		if len(pids) < 2 {
			t.Fatalf("CONTROL FAILED: want the agent and the sleep in the sandbox's cgroup, got %v", pids)
		}
		for _, pid := range pids {
			env, err := os.ReadFile(filepath.Join("/proc", pid, "environ"))
			if err != nil {
				t.Errorf("read the environ of sandbox process %s: %v", pid, err)
				continue
			}
			if strings.Contains(string(env), hostCanaryValue) {
				t.Errorf("ESCAPE: sandbox process %s carries the host's canary in its environment", pid)
			}
		}
	})
}

// agentKeyOf is the key (as the keyring's export writes it) that the agent of sandbox id
// holds: what must not be found inside.
func agentKeyOf(t *testing.T, caps *capability.Keyring, id string) string {
	t.Helper()
	k, err := caps.ForAgent("sandbox:" + id)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(k.Export())) {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "key" {
			return f[2]
		}
	}
	t.Fatal("CONTROL FAILED: no key in the agent's keyring export")
	return ""
}
