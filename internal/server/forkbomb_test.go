package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/servertest"
)

// sandboxPids lists the processes of sandbox id, as the host's cgroup holds them.
func sandboxPids(t *testing.T, id string) []int {
	t.Helper()
	g, err := cgroups.Load("/paddock/" + id)
	if err != nil {
		t.Fatal(err)
	}
	pids, err := g.Pids()
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

// An exec's processes end with it: a fork bomb that backgrounds itself (and so outlives
// the shell the exec ran, in a new session for good measure) is gone once the exec has
// answered, the sandbox holds what it held before, and the next exec works.
func TestForkBombEndsWithItsExec(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work", Limits: api.Limits{Pids: 64}}), http.StatusCreated, &sb)
	execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"true"}})
	before := len(sandboxPids(t, sb.ID))

	bomb := `b() { b | b & }; setsid sh -c 'b() { b | b & }; b' & b; sleep 1`
	execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", bomb}, TimeoutMS: 10000})
	if after := sandboxPids(t, sb.ID); len(after) > before {
		t.Errorf("after the fork bomb's exec answered, the sandbox holds %d processes, it held %d", len(after), before)
	}
	res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "for i in 1 2 3 4 5 6 7 8; do (true); done; echo ok"}})
	if strings.TrimSpace(string(res.Stdout)) != "ok" {
		t.Errorf("the next exec: %+v", res)
	}
}

// The agent survives its sandbox's memory pressure: filling /tmp (a tmpfs as large as the
// memory limit allows, whose pages no kill frees) makes the memory limit kill the command
// that filled it, in the commands' group, never the agent, which keeps answering with the
// same process.
func TestAgentSurvivesMemoryPressure(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work", Limits: api.Limits{Memory: "256MiB", Tmp: "250MiB"}}), http.StatusCreated, &sb)
	pid := agentPID(t, sb.ID)
	res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"dd", "if=/dev/zero", "of=/tmp/fill", "bs=1M", "count=250"}, TimeoutMS: 60000})
	if res.Limit != api.LimitMemory {
		t.Errorf("filling /tmp past the memory limit: %+v, want the memory limit named", res)
	}
	res = execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"rm", "-f", "/tmp/fill"}})
	if res.ExitCode != 0 {
		t.Errorf("rm after the fill: %+v", res)
	}
	if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"echo", "ok"}}); string(res.Stdout) != "ok\n" {
		t.Errorf("an exec after the fill: %+v", res)
	}
	if agentPID(t, sb.ID) != pid {
		t.Error("the agent is another process: the first one died")
	}
	var evs api.EventList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/events?action=sandbox.agent_exited", nil), http.StatusOK, &evs)
	if len(evs.Events) != 0 {
		t.Errorf("the agent exited: %+v", evs.Events)
	}
}
