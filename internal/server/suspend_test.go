package server_test

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
)

// A live sandbox nothing used (a running exec is a use) for idle.after is stopped with its workspace kept; the next
// request through the proxy starts it again and is answered, not failed. A sandbox of no
// role is left running.
func TestIdleSuspendAndWake(t *testing.T) {
	e := servertest.Start(t, func(c *server.Config) { c.Idle.After = time.Second })
	alice := e.Register(t, "alice")
	alice.Start()
	resp := alice.App("GET", "/", nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the live app: %d", resp.StatusCode)
	}
	var roles api.Roles
	servertest.Decode(t, alice.Do("GET", "/api/v1/roles", nil), http.StatusOK, &roles)
	live := roles.Live.ID
	// An exec that runs for longer than idle.after keeps the sandbox awake.
	if res := execIn(t, alice, live, api.ExecRequest{Argv: []string{"sh", "-c", "sleep 3 && echo kept > kept.txt && echo done"}}); string(res.Stdout) != "done\n" {
		t.Fatalf("a long exec in the live sandbox: %+v", res)
	}
	var other api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "other"}), http.StatusCreated, &other)

	state := func(id string) string {
		var sb api.Sandbox
		servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+id, nil), http.StatusOK, &sb)
		return sb.State
	}
	for deadline := time.Now().Add(2 * time.Minute); state(live) != api.StateStopped; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the idle live sandbox was never suspended:\n%s", e.Logs)
		}
	}
	if s := state(other.ID); s != api.StateRunning {
		t.Errorf("a sandbox of no role is %s after the live one was suspended", s)
	}
	resp = alice.App("GET", "/", nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get(api.HeaderRole) != "live" {
		t.Fatalf("the request that wakes the live sandbox: %d role %q", resp.StatusCode, resp.Header.Get(api.HeaderRole))
	}
	if res := execIn(t, alice, live, api.ExecRequest{Argv: []string{"cat", "kept.txt"}}); string(res.Stdout) != "kept\n" {
		t.Errorf("the woken sandbox's workspace: %+v", res)
	}
}

// A wake that cannot start answers the held request with a 503 and Retry-After.
func TestWakeFails(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	alice.Start()
	var roles api.Roles
	servertest.Decode(t, alice.Do("GET", "/api/v1/roles", nil), http.StatusOK, &roles)
	live := roles.Live.ID
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+live+"/stop", nil), http.StatusOK, nil)
	// Its workspace is now a file: it cannot be mounted, so the sandbox cannot start.
	ws := filepath.Join(e.Config.Runner.WorkspaceRoot, "alice", "sandboxes", live)
	if err := runner.UnmountAll(filepath.Dir(ws)); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(ws); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ws, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	resp := alice.App("GET", "/", nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a wake that cannot start: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

// A wake refused by a limit (here the disk: a policy raised the live sandbox's disk past
// what the host has free) is a 503 with Retry-After that says why, not the limit's 429:
// the request was held for a start, and the start is what failed.
func TestWakeFailsOverDisk(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	alice.Start()
	var roles api.Roles
	servertest.Decode(t, alice.Do("GET", "/api/v1/roles", nil), http.StatusOK, &roles)
	live := roles.Live.ID
	resp := putPolicy(t, alice, live, "application/yaml", "resources: {disk: 1000TiB}\n")
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("attach a policy with a 1000TiB disk: %d", resp.StatusCode)
	}
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+live+"/stop", nil), http.StatusOK, nil)
	resp = alice.App("GET", "/", nil)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "disk") {
		t.Errorf("a wake refused by the disk reserve: %d, Retry-After %q, %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
}

// A live sandbox unused for idle.freeze_after is frozen, not stopped: the next request
// thaws it and is answered, and what its processes held (here /tmp, which a stop would
// empty) is still there. Unused for idle.after, the frozen sandbox is stopped.
func TestIdleFreezeAndThaw(t *testing.T) {
	e := servertest.Start(t, func(c *server.Config) { c.Idle.FreezeAfter, c.Idle.After = time.Second, 6*time.Second })
	alice := e.Register(t, "alice")
	alice.Start()
	var roles api.Roles
	servertest.Decode(t, alice.Do("GET", "/api/v1/roles", nil), http.StatusOK, &roles)
	live := roles.Live.ID
	if res := execIn(t, alice, live, api.ExecRequest{Argv: []string{"sh", "-c", "echo kept > /tmp/mark"}}); res.ExitCode != 0 {
		t.Fatalf("mark /tmp: %+v", res)
	}
	frozen := func() bool {
		g, err := cgroups.Load("/paddock/" + live)
		if err != nil {
			t.Fatal(err)
		}
		f, err := g.Frozen()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	for deadline := time.Now().Add(2 * time.Minute); !frozen(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the idle live sandbox was never frozen:\n%s", e.Logs)
		}
	}
	resp := alice.App("GET", "/", nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get(api.HeaderRole) != "live" {
		t.Fatalf("the request that thaws the live sandbox: %d role %q", resp.StatusCode, resp.Header.Get(api.HeaderRole))
	}
	if frozen() {
		t.Error("the live sandbox is still frozen after a request")
	}
	if res := execIn(t, alice, live, api.ExecRequest{Argv: []string{"cat", "/tmp/mark"}}); string(res.Stdout) != "kept\n" {
		t.Errorf("/tmp after the thaw: %+v, want what was written before the freeze", res)
	}
	state := func() string {
		var sb api.Sandbox
		servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+live, nil), http.StatusOK, &sb)
		return sb.State
	}
	for deadline := time.Now().Add(2 * time.Minute); state() != api.StateStopped; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the frozen live sandbox was never stopped after idle.after:\n%s", e.Logs)
		}
	}
}
