package server_test

import (
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/servertest"
)

// agentPID finds the host pid of sandbox id's agent: the process of its cgroup that is
// PID 1 in its own namespace.
func agentPID(t *testing.T, id string) int {
	t.Helper()
	g, err := cgroups.Load("/paddock/" + id)
	if err != nil {
		t.Fatal(err)
	}
	pids, err := g.Pids()
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			if f := strings.Fields(line); len(f) > 2 && f[0] == "NSpid:" && f[len(f)-1] == "1" {
				return pid
			}
		}
	}
	t.Fatalf("no agent among %v", pids)
	return 0
}

// A sandbox whose agent is gone says so (a sandbox.agent_exited event with the reason, the
// state failed meanwhile) and recovers by itself: it runs again and answers execs, with
// its workspace, and nobody had to restart it.
func TestAgentGoneRecovers(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work"}), http.StatusCreated, &sb)
	execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo kept > /workspace/kept"}})
	pid := agentPID(t, sb.ID)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	var said api.Event
	for said.ID == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no sandbox.agent_exited event")
		}
		var evs api.EventList
		servertest.Decode(t, alice.DoToken("GET", "/api/v1/events?action=sandbox.agent_exited", nil), http.StatusOK, &evs)
		if len(evs.Events) > 0 {
			said = evs.Events[0]
		}
		time.Sleep(50 * time.Millisecond)
	}
	if said.Target != sb.ID || said.Detail["state"] != api.StateFailed || !strings.Contains(said.Detail["error"].(string), "agent exited") {
		t.Errorf("agent_exited event: %+v", said)
	}
	for {
		var got api.Sandbox
		servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+sb.ID, nil), http.StatusOK, &got)
		if got.State == api.StateRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not running again: %+v", got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"cat", "/workspace/kept"}}); string(res.Stdout) != "kept\n" {
		t.Errorf("after the restart: %+v", res)
	}
	if agentPID(t, sb.ID) == pid {
		t.Error("the same agent pid: it never exited")
	}
}
