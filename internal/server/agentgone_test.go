package server_test

import (
	"net/http"
	"os"
	"regexp"
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

// A start whose agent exits while it waits for the app to listen stops waiting then,
// rather than for the whole appWait, and says why; the watch then starts it again.
func TestStartStopsWaitingForTheAppWhenTheAgentExits(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	// An app that never listens, with a name to find it by among the sandbox's processes.
	app := api.Template{Command: []string{"sh", "-c", "exec sleep 86399"}, Port: 8080}
	killed := make(chan int, 1)
	go func() {
		defer close(killed)
		// The app runs once the agent has been handed its envelope: the start is then
		// past Create and in (or about to be in) its wait for the app.
		for range 6000 {
			if pid, ok := agentOfApp("sleep 86399"); ok {
				if syscall.Kill(pid, syscall.SIGKILL) == nil {
					killed <- pid
				}
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "deaf", App: app}), http.StatusCreated, &sb)
	if _, ok := <-killed; !ok {
		t.Fatal("the app never ran, or its agent could not be killed")
	}
	logs := e.Logs.String()
	want := regexp.MustCompile(`sandbox app not answering" sandbox=` + sb.ID + ` port=8080 err="the sandbox's agent exited before the app listened on port 8080"`)
	if !want.MatchString(logs) {
		t.Errorf("the start did not say its agent exited while it waited for the app:\n%s", logs)
	}
}

// agentOfApp finds a process whose command line is cmdline and returns its parent, the
// agent that started it (the app is started through the trampoline, which execs it).
func agentOfApp(cmdline string) (int, bool) {
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		b, err := os.ReadFile("/proc/" + p.Name() + "/cmdline")
		if err != nil || strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ") != cmdline {
			continue
		}
		status, err := os.ReadFile("/proc/" + p.Name() + "/status")
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(status)) {
			if v, ok := strings.CutPrefix(line, "PPid:"); ok {
				ppid, err := strconv.Atoi(strings.TrimSpace(v))
				return ppid, err == nil
			}
		}
	}
	return 0, false
}
