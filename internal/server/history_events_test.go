package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
)

// historyEvents reads a sandbox's timeline from the event store through the API.
func historyEvents(t *testing.T, c *servertest.Client, id string, after int64) []api.Event {
	t.Helper()
	var l api.EventList
	servertest.Decode(t, c.DoToken("GET", fmt.Sprintf("/api/v1/sandboxes/%s/history/events?after=%d", id, after), nil), http.StatusOK, &l)
	return l.Events
}

// waitEvent waits for a timeline event that match accepts, after the cursor.
func waitEvent(t *testing.T, c *servertest.Client, id string, after int64, what string, match func(api.Event) bool) api.Event {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		evs := historyEvents(t, c, id, after)
		for _, e := range evs {
			if match(e) {
				return e
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s event in the store; have %+v", what, evs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func cause(want string) func(api.Event) bool {
	return func(e api.Event) bool { return e.Action == "history.checkpoint" && e.Detail["cause"] == want }
}

// Timeline events reach the control plane's event store, from a real sandbox's agent:
// checkpoints after a write through the file API and after an exec, a restore after an
// undo, never a file's contents; they are listed by sandbox and in the owner's events, and
// stopping the sandbox ends the subscription.
func TestHistoryEventsReachTheStore(t *testing.T) {
	const canary = "CANARY-history-content-7f3e"
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	waitFollowers := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for e.Server.HistoryFollowers() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%d history subscriptions, want %d", e.Server.HistoryFollowers(), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	before := e.Server.HistoryFollowers()
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "ev"}), http.StatusCreated, &sb)
	waitFollowers(before + 1)

	start := waitEvent(t, alice, sb.ID, 0, "start checkpoint", cause("watcher"))
	putFile(t, alice, sb.ID, "secret.txt", canary)
	w := waitEvent(t, alice, sb.ID, start.ID, "agent-write checkpoint", cause("agent-write"))
	if w.Detail["sandbox_id"] != sb.ID || w.Target != sb.ID || w.Detail["changed"] != 1.0 || w.Detail["checkpoint"] == "" || w.Actor == "" {
		t.Fatalf("agent-write event %+v, want the sandbox, a checkpoint of 1 change, the owner", w)
	}
	execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo " + canary + " >> secret.txt"}})
	x := waitEvent(t, alice, sb.ID, w.ID, "exec checkpoint", cause("exec"))
	if x.Detail["parent"] != w.Detail["checkpoint"] {
		t.Errorf("exec event %+v, want its parent the write's checkpoint %v", x, w.Detail["checkpoint"])
	}
	restoreOp(t, alice, sb.ID, "undo", nil)
	u := waitEvent(t, alice, sb.ID, x.ID, "restore", func(e api.Event) bool { return e.Action == "history.restore" })
	if u.Detail["op"] != "undo" || u.Detail["restores"] != w.Detail["checkpoint"] || u.Detail["cause"] != api.CauseRestore {
		t.Errorf("undo event %+v, want an undo restoring %v", u, w.Detail["checkpoint"])
	}

	// The owner's event listing shows them too.
	var mine api.EventList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/events?action=history.checkpoint", nil), http.StatusOK, &mine)
	if len(mine.Events) < 3 {
		t.Errorf("GET /api/v1/events?action=history.checkpoint: %d events, want at least 3", len(mine.Events))
	}
	// Never a file's contents (the path of a write is in its message; what it wrote is not).
	for _, ev := range historyEvents(t, alice, sb.ID, 0) {
		b, _ := json.Marshal(ev)
		if strings.Contains(string(b), canary) {
			t.Fatalf("event carries file contents: %s", b)
		}
	}
	// Bad input and others' sandboxes.
	base := "/api/v1/sandboxes/" + sb.ID + "/history/events"
	servertest.ErrorOf(t, alice.DoToken("GET", base+"?after=x", nil), http.StatusBadRequest)
	servertest.ErrorOf(t, alice.DoToken("GET", base+"?limit=0", nil), http.StatusBadRequest)
	bob := e.Register(t, "bob")
	servertest.ErrorOf(t, bob.DoToken("GET", base, nil), http.StatusNotFound)

	// Stopping the sandbox ends the subscription; the timeline stays readable.
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/stop", nil), http.StatusOK, nil)
	waitFollowers(before)
	if n := len(historyEvents(t, alice, sb.ID, 0)); n < 4 {
		t.Errorf("timeline of a stopped sandbox: %d events, want at least 4", n)
	}
	// Started again, it is followed again, and what happened at start reaches the store.
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/start", nil), http.StatusOK, nil)
	waitFollowers(before + 1)
	last := historyEvents(t, alice, sb.ID, 0)
	putFile(t, alice, sb.ID, "again.txt", "x")
	waitEvent(t, alice, sb.ID, last[len(last)-1].ID, "agent-write after restart", cause("agent-write"))
	servertest.Decode(t, alice.DoToken("DELETE", "/api/v1/sandboxes/"+sb.ID, nil), http.StatusNoContent, nil)
	waitFollowers(before)
}
