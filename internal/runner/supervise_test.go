package runner_test

import (
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// waitRestarts polls App until the app has been restarted at least n times.
func waitRestarts(t *testing.T, sb *runner.Sandbox, n int32, within time.Duration) *pb.AppStatus {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		st, err := sb.Agent().Agent().App(tctx(t), &pb.AppRequest{})
		if err != nil {
			t.Fatalf("App: %v", err)
		}
		if st.Restarts >= n {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("App = %+v, want %d restarts", st, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// executeWithin runs a command in the sandbox and fails unless it answers within d.
func executeWithin(t *testing.T, sb *runner.Sandbox, d time.Duration) *pb.ExecuteResponse {
	t.Helper()
	start := time.Now()
	resp, err := sb.Agent().Process().Execute(tctx(t), &pb.ExecuteRequest{Argv: []string{"echo", "ok"}, TimeoutMs: uint64(d.Milliseconds())})
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if el := time.Since(start); el > d+time.Second {
		t.Fatalf("Execute answered after %v", el)
	}
	return resp
}

// With RestartMain the agent keeps the app running, and serves meanwhile.
func TestSupervisedAppRestarts(t *testing.T) {
	sb := create(t, runner.Spec{User: "sup", Main: []string{"sh", "-c", "echo up; exit 3"}, RestartMain: true,
		Limits: wire.Limits{Timeout: time.Minute}})
	st := waitRestarts(t, sb, 2, 20*time.Second)
	if st.LastExit.GetExitCode() != 3 {
		t.Fatalf("App = %+v, want last exit 3", st)
	}
	if resp := executeWithin(t, sb, 5*time.Second); string(resp.Stdout) != "ok\n" {
		t.Fatalf("Execute = %+v", resp)
	}
}

// A fork bomb for an app (dash refuses ":" as a function name, hence "b") takes every pid of the sandbox, but not the agent's reserve: the
// agent still answers, and the supervisor keeps going.
func TestSupervisedForkBomb(t *testing.T) {
	sb := create(t, runner.Spec{User: "sup", Main: []string{"sh", "-c", "b(){ b|b& }; b"}, RestartMain: true,
		Limits: wire.Limits{Timeout: time.Minute, Pids: 64}})
	time.Sleep(2 * time.Second) // let it take the pids
	for range 3 {
		executeWithin(t, sb, 3*time.Second) // an answer, whatever the command managed
		waitRestarts(t, sb, 0, time.Second)
	}
	st := waitRestarts(t, sb, 1, 20*time.Second)
	t.Logf("after the bomb: state %s, %d restarts, last exit %v", st.State, st.Restarts, st.LastExit)
	// Killing the bomb's process group with each run frees the pids, so commands run again.
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp := executeWithin(t, sb, 3*time.Second)
		if string(resp.Stdout) == "ok\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Logf("commands still fail under the bomb: %+v", resp)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
}
