package server_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
)

// metricValue is the value of the sample of the metrics text that starts with prefix, or -1.
func metricValue(text, prefix string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, prefix+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

const (
	poolSize   = `paddock_pool_size{template="default"}`
	poolHits   = `paddock_pool_claims_total{result="hit",template="default"}`
	poolMisses = `paddock_pool_claims_total{result="miss",template="default"}`
)

// waitPool waits until the pool holds n sandboxes, and returns their IDs.
func waitPool(t *testing.T, e *servertest.Env, n int) []string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for metricValue(e.Metrics(t), poolSize) != float64(n) {
		if time.Now().After(deadline) {
			t.Fatalf("the pool never held %d sandboxes:\n%s", n, e.Logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	names, err := os.ReadDir(filepath.Join(e.Config.Runner.WorkspaceRoot, ".pool", "history"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, n := range names {
		ids = append(ids, n.Name())
	}
	return ids
}

// A new sandbox of the default app comes from the warm pool (a hit), runs commands at
// once, has its workspace in its user's tree, and the pool refills; two users never get
// the same one.
func TestPoolClaim(t *testing.T) {
	e := servertest.Start(t, func(c *server.Config) { c.Pool.Size = 1 })
	pooled := waitPool(t, e, 1)
	agentPid := initPid(t, e, pooled[0])
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{}), http.StatusCreated, &sb)
	if len(pooled) != 1 || sb.ID != pooled[0] || sb.Name != sb.ID || sb.State != api.StateRunning {
		t.Fatalf("created %+v; the pool held %v", sb, pooled)
	}
	// The very sandbox the pool started, not one started again under its ID.
	if pid := initPid(t, e, sb.ID); pid != agentPid {
		t.Errorf("the claimed sandbox's agent is pid %d, the pooled one's was %d:\n%s", pid, agentPid, e.Logs)
	}
	if m := e.Metrics(t); metricValue(m, poolHits) != 1 || metricValue(m, poolMisses) != 0 {
		t.Errorf("after a claim: hits %v, misses %v", metricValue(m, poolHits), metricValue(m, poolMisses))
	}
	res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo hi > mine.txt && cat mine.txt && whoami"}})
	if res.ExitCode != 0 || !strings.HasPrefix(string(res.Stdout), "hi\n") {
		t.Fatalf("exec in a claimed sandbox: %+v", res)
	}
	ws := filepath.Join(e.Config.Runner.WorkspaceRoot, "alice", "sandboxes", sb.ID)
	if _, err := os.Stat(filepath.Join(ws, "workspace", "mine.txt")); err != nil {
		if _, err2 := os.Stat(filepath.Join(ws, "mine.txt")); err2 != nil {
			t.Errorf("the claimed workspace is not in alice's tree: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(e.Config.Runner.WorkspaceRoot, "alice", "history", sb.ID)); err != nil {
		t.Errorf("the claimed history is not in alice's tree: %v", err)
	}
	// Its processes run at the usual priority, not the pool's.
	if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"nice"}}); strings.TrimSpace(string(res.Stdout)) != "0" {
		t.Errorf("nice in a claimed sandbox: %q", res.Stdout)
	}

	refilled := waitPool(t, e, 1)
	bob := e.Register(t, "bob")
	var bobs api.Sandbox
	servertest.Decode(t, bob.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "b"}), http.StatusCreated, &bobs)
	if bobs.ID == sb.ID || bobs.ID != refilled[0] || bobs.Name != "b" {
		t.Fatalf("bob's sandbox %+v; alice's %s; the pool held %v", bobs, sb.ID, refilled)
	}
	if res := execIn(t, bob, bobs.ID, api.ExecRequest{Argv: []string{"ls", "-A"}}); strings.Contains(string(res.Stdout), "mine.txt") {
		t.Errorf("bob's sandbox shows alice's file: %q", res.Stdout)
	}
	// HOME and the caches of a pooled sandbox are its own: a disk made before anyone
	// claimed it would be shared by whoever claims its siblings.
	execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo alice > \"$HOME/left-by-alice\""}})
	if res := execIn(t, bob, bobs.ID, api.ExecRequest{Argv: []string{"sh", "-c", "cat \"$HOME/left-by-alice\"; grep -c ' /shared ' /proc/self/mountinfo"}}); strings.Contains(string(res.Stdout), "alice") || strings.TrimSpace(string(res.Stdout)) != "0" {
		t.Errorf("bob's pooled sandbox sees alice's HOME or a shared disk: %q", res.Stdout)
	}
	// A request the pool does not match starts anew, and is not counted.
	var other api.Sandbox
	servertest.Decode(t, bob.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Env: []string{"A=b"}}), http.StatusCreated, &other)
	if other.ID == refilled[0] {
		t.Errorf("a sandbox with its own env came from the pool")
	}
	if m := e.Metrics(t); metricValue(m, poolHits) != 2 {
		t.Errorf("hits %v, want 2", metricValue(m, poolHits))
	}
}

// A pooled sandbox whose agent dies while idle is replaced at once and never handed out:
// the next create gets another one, which works.
func TestPoolDeadMember(t *testing.T) {
	e := servertest.Start(t, func(c *server.Config) { c.Pool.Size = 1 })
	dead := waitPool(t, e, 1)[0]
	pid := initPid(t, e, dead)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); syscall.Kill(pid, 0) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the pooled sandbox's agent (pid %d) did not die", pid)
		}
	}
	// It is replaced while idle, before anyone asks for a sandbox.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if ids := waitPool(t, e, 1); len(ids) == 1 && ids[0] != dead {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool still holds its dead member %s and nothing else:\n%s", dead, e.Logs)
		}
	}
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{}), http.StatusCreated, &sb)
	if sb.ID == dead {
		t.Fatalf("the dead pooled sandbox %s was handed out", dead)
	}
	if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"true"}}); res.ExitCode != 0 {
		t.Errorf("exec: %+v", res)
	}
	if !regexp.MustCompile(`discarding a sandbox.*` + dead).MatchString(e.Logs.String()) {
		t.Errorf("the dead member was not discarded:\n%s", e.Logs)
	}
}

// initPid is the host pid of sandbox id's agent.
func initPid(t *testing.T, e *servertest.Env, id string) int {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(e.Config.Runner.StateDir, "sandboxes", id, "init.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(text)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// A user's first live and dev sandboxes come from the pool, named for their roles, and the
// live one's app answers through the proxy.
func TestPoolRoles(t *testing.T) {
	e := servertest.Start(t, func(c *server.Config) { c.Pool.Size = 2 })
	pooled := waitPool(t, e, 2)
	alice := e.Register(t, "alice")
	alice.Start()
	var roles api.Roles
	servertest.Decode(t, alice.Do("GET", "/api/v1/roles", nil), http.StatusOK, &roles)
	got := map[string]bool{roles.Live.ID: true, roles.Dev.ID: true}
	if !got[pooled[0]] || !got[pooled[1]] || !strings.HasPrefix(roles.Live.Name, "live-") || !strings.HasPrefix(roles.Dev.Name, "dev-") {
		t.Fatalf("roles %+v / %+v; the pool held %v", roles.Live, roles.Dev, pooled)
	}
	if m := e.Metrics(t); metricValue(m, poolHits) != 2 {
		t.Errorf("hits %v, want 2", metricValue(m, poolHits))
	}
	resp := alice.App("GET", "/", nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get(api.HeaderRole) != "live" {
		t.Errorf("the live app from the pool: %d role %q", resp.StatusCode, resp.Header.Get(api.HeaderRole))
	}
}

// A reload that changes the capability keyring replaces the pool's sandboxes, which were
// started with the old one.
func TestPoolDrainedByKeyRotation(t *testing.T) {
	e := servertest.Start(t, func(c *server.Config) { c.Pool.Size = 1 })
	old := waitPool(t, e, 1)[0]
	if _, err := server.RotateCapabilityKeys(e.Config); err != nil {
		t.Fatal(err)
	}
	if err := e.Server.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if ids := waitPool(t, e, 1); len(ids) == 1 && ids[0] != old {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool still holds %s, started before the rotation", old)
		}
	}
}
