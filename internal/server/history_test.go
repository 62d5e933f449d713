package server_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/wire"
)

func history(t *testing.T, c *servertest.Client, id string) api.History {
	t.Helper()
	var h api.History
	servertest.Decode(t, c.DoToken("GET", "/api/v1/sandboxes/"+id+"/history", nil), http.StatusOK, &h)
	if len(h.Checkpoints) == 0 {
		t.Fatalf("history of %s is empty", id)
	}
	return h
}

func putFile(t *testing.T, c *servertest.Client, id, path, data string) {
	t.Helper()
	servertest.Decode(t, c.DoToken("PUT", "/api/v1/sandboxes/"+id+"/files/content?path="+path, bytes.NewReader([]byte(data))), http.StatusOK, nil)
}

// fileContent reads a workspace file through the API; "<none>" when it does not exist.
func fileContent(t *testing.T, c *servertest.Client, id, path string) string {
	t.Helper()
	resp := c.DoToken("GET", "/api/v1/sandboxes/"+id+"/files/content?path="+path, nil)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
		return string(b)
	case http.StatusNotFound:
		return "<none>"
	}
	t.Fatalf("read %s: %d %s", path, resp.StatusCode, b)
	return ""
}

func restoreOp(t *testing.T, c *servertest.Client, id, op string, body any) api.RestoreResult {
	t.Helper()
	var res api.RestoreResult
	servertest.Decode(t, c.DoToken("POST", "/api/v1/sandboxes/"+id+"/history/"+op, body), http.StatusOK, &res)
	return res
}

// The workspace's history through the API, on a real sandbox: the agent checkpoints file
// writes and execs by itself, undo and redo and restore rewrite the workspace in place (the
// files stay the sandbox user's), a manual checkpoint of nothing makes none, bad and
// missing checkpoints are precise 4xx, every change is audited, and the history survives
// a stop and start of the sandbox.
func TestHistory(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "h"}), http.StatusCreated, &sb)
	base := "/api/v1/sandboxes/" + sb.ID + "/history"

	putFile(t, alice, sb.ID, "a.txt", "one")
	h := history(t, alice, sb.ID)
	w := h.Checkpoints[0]
	if w.Cause != api.CauseAgentWrite || w.Message != "write a.txt" || w.Changed != 1 || h.Current != w.ID {
		t.Fatalf("after a write through the file API: %+v (current %s), want an agent-write of a.txt", w, h.Current)
	}
	execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo x > a.txt"}})
	h = history(t, alice, sb.ID)
	x := h.Checkpoints[0]
	if x.Cause != api.CauseExec || x.Parent != w.ID || x.Changed != 1 {
		t.Fatalf("after exec: %+v, want an exec checkpoint after %s", x, w.ID)
	}

	var cp api.CheckpointResult
	servertest.Decode(t, alice.DoToken("POST", base+"/checkpoints", api.CheckpointRequest{Message: "before refactor"}), http.StatusOK, &cp)
	if cp.Created || cp.Checkpoint.ID != x.ID {
		t.Fatalf("checkpoint of nothing changed: %+v, want the current one, not created", cp)
	}

	u := restoreOp(t, alice, sb.ID, "undo", nil)
	if got := fileContent(t, alice, sb.ID, "a.txt"); got != "one" || u.Current != w.ID || u.Checkpoint.Cause != api.CauseRestore || !u.AppRestarted {
		t.Fatalf("undo: a.txt = %q, %+v; want \"one\", current %s, the app restarted", got, u, w.ID)
	}
	// Restored files are the sandbox user's, as the ones they replace were.
	own := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "test $(stat -c %u a.txt) = $(id -u) && echo mine"}})
	if string(own.Stdout) != "mine\n" {
		t.Errorf("restored a.txt is not the sandbox user's: %+v", own)
	}
	restoreOp(t, alice, sb.ID, "redo", nil)
	if got := fileContent(t, alice, sb.ID, "a.txt"); got != "x\n" {
		t.Fatalf("redo: a.txt = %q, want \"x\\n\"", got)
	}
	restoreOp(t, alice, sb.ID, "restore", api.RestoreRequest{Checkpoint: w.ID})
	if got := fileContent(t, alice, sb.ID, "a.txt"); got != "one" {
		t.Fatalf("restore to %s: a.txt = %q, want \"one\"", w.ID, got)
	}
	first := history(t, alice, sb.ID).Checkpoints
	restoreOp(t, alice, sb.ID, "restore", api.RestoreRequest{Checkpoint: first[len(first)-1].ID})
	if got := fileContent(t, alice, sb.ID, "a.txt"); got != "<none>" {
		t.Fatalf("restore to the start: a.txt = %q, want none", got)
	}
	var d api.HistoryDiff
	servertest.Decode(t, alice.DoToken("GET", base+"/diff?to="+w.ID, nil), http.StatusOK, &d)
	if len(d.Added) != 1 || d.Added[0] != "a.txt" {
		t.Errorf("diff of %s: %+v, want a.txt added", w.ID, d)
	}
	if d.Files != nil {
		t.Errorf("diff without lines: files %+v, want none", d.Files)
	}
	// With lines=true, each file's line diff: the exec turned "one" into "x\n".
	servertest.Decode(t, alice.DoToken("GET", base+"/diff?lines=true&to="+x.ID, nil), http.StatusOK, &d)
	want := "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-one\n\\ No newline at end of file\n+x\n"
	if len(d.Files) != 1 || d.Files[0].Path != "a.txt" || d.Files[0].Status != "changed" || d.Files[0].Unified != want {
		t.Errorf("line diff of %s: %+v, want %q", x.ID, d.Files, want)
	}
	if e := servertest.ErrorOf(t, alice.DoToken("GET", base+"/diff?lines=yes&to="+x.ID, nil), http.StatusBadRequest); !strings.Contains(e.Message, `lines="yes"`) {
		t.Errorf("lines=yes: %+v, want it named", e)
	}

	// Bad input: precise 4xx that say what was wrong.
	if e := servertest.ErrorOf(t, alice.DoToken("POST", base+"/restore", api.RestoreRequest{Checkpoint: "9999"}), http.StatusNotFound); !strings.Contains(e.Message, `"9999"`) {
		t.Errorf("restore of a missing checkpoint: %+v, want it named", e)
	}
	servertest.ErrorOf(t, alice.DoToken("POST", base+"/restore", api.RestoreRequest{}), http.StatusBadRequest)
	servertest.ErrorOf(t, alice.DoToken("POST", base+"/restore", strings.NewReader(`{"checkpoint": 3}`)), http.StatusBadRequest)
	servertest.ErrorOf(t, alice.DoToken("GET", base+"/diff", nil), http.StatusBadRequest)
	servertest.ErrorOf(t, alice.DoToken("GET", base+"/diff?to=9999", nil), http.StatusNotFound)
	servertest.ErrorOf(t, alice.DoToken("POST", base+"/checkpoints", api.CheckpointRequest{Message: strings.Repeat("m", 5000)}), http.StatusBadRequest)
	if e := servertest.ErrorOf(t, alice.DoToken("POST", base+"/redo", nil), http.StatusConflict); !strings.Contains(e.Message, "nothing to redo") {
		t.Errorf("redo with nothing to redo: %+v", e)
	}

	// The history outlives a stop and start of the sandbox.
	before := history(t, alice, sb.ID)
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/stop", nil), http.StatusOK, nil)
	servertest.ErrorOf(t, alice.DoToken("GET", base, nil), http.StatusConflict)
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/start", nil), http.StatusOK, nil)
	after := history(t, alice, sb.ID)
	if after.Current != before.Current || len(after.Checkpoints) != len(before.Checkpoints) {
		t.Errorf("history after stop and start: %d checkpoints at %s, want %d at %s", len(after.Checkpoints), after.Current, len(before.Checkpoints), before.Current)
	}

	var evs api.EventList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/events?limit=200", nil), http.StatusOK, &evs)
	seen := map[string]bool{}
	for _, ev := range evs.Events {
		seen[ev.Action] = true
	}
	for _, a := range []string{"sandbox.history_undo", "sandbox.history_redo", "sandbox.history_restore"} {
		if !seen[a] {
			t.Errorf("no %s event in %v", a, seen)
		}
	}
}

// A manual checkpoint of a changed workspace is created (201), with its message.
func TestHistoryManualCheckpoint(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{}), http.StatusCreated, &sb)
	history(t, alice, sb.ID) // the checkpoint of the workspace at start is in
	// Written by the sandbox's own process, not recorded yet (the watcher's next round
	// would): the manual checkpoint takes it.
	res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "(sleep 0.5; echo late > late.txt) >/dev/null 2>&1 &"}})
	if res.ExitCode != 0 {
		t.Fatalf("exec: %+v", res)
	}
	time.Sleep(800 * time.Millisecond)
	var cp api.CheckpointResult
	resp := alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/history/checkpoints", api.CheckpointRequest{Message: "before refactor"})
	if resp.StatusCode == http.StatusOK {
		// The watcher was quicker: then it holds the change.
		servertest.Decode(t, resp, http.StatusOK, &cp)
		if cp.Checkpoint.Cause != api.CauseWatcher {
			t.Fatalf("checkpoint not created, and the current one is %+v", cp)
		}
		return
	}
	servertest.Decode(t, resp, http.StatusCreated, &cp)
	if !cp.Created || cp.Checkpoint.Cause != api.CauseManual || cp.Checkpoint.Message != "before refactor" || cp.Checkpoint.Changed != 1 {
		t.Fatalf("manual checkpoint: %+v", cp)
	}
}

// Undo works while the sandbox's app crash-loops, and restarts it at once.
func TestUndoWhileAppCrashLoops(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{App: api.Template{Command: []string{"sh", "-c", "exit 1"}, Port: 8080}}), http.StatusCreated, &sb)
	putFile(t, alice, sb.ID, "v", "good")
	putFile(t, alice, sb.ID, "v", "bad")
	time.Sleep(500 * time.Millisecond) // a few crashes
	u := restoreOp(t, alice, sb.ID, "undo", nil)
	if got := fileContent(t, alice, sb.ID, "v"); got != "good" || !u.AppRestarted {
		t.Fatalf("undo with a crash-looping app: v = %q, %+v", got, u)
	}
	restoreOp(t, alice, sb.ID, "redo", nil)
	if got := fileContent(t, alice, sb.ID, "v"); got != "bad" {
		t.Fatalf("redo with a crash-looping app: v = %q", got)
	}
}

// The history store is out of the sandbox's reach: a command, run as the sandbox user,
// can neither list, read nor write it.
func TestHistoryStoreIsOutOfReach(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{}), http.StatusCreated, &sb)
	putFile(t, alice, sb.ID, "a.txt", "one")
	history(t, alice, sb.ID)
	dir := wire.HistoryPath
	for _, cmd := range []string{
		"ls " + dir,
		"cat " + dir + "/index.json",
		"touch " + dir + "/x",
		"rm -f " + dir + "/index.json",
	} {
		res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", cmd}})
		if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "Permission denied") {
			t.Errorf("%s as the sandbox user: exit %d, %q; want permission denied", cmd, res.ExitCode, res.Stderr)
		}
	}
	// And it is still whole.
	if h := history(t, alice, sb.ID); h.Checkpoints[0].Message != "write a.txt" {
		t.Errorf("history after the attempts: %+v", h.Checkpoints[0])
	}
}

// Under gVisor (runsc) the store reaches the agent through gVisor's file server: history
// works the same, and stays out of the sandbox user's reach.
func TestHistoryUnderGVisor(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Runtime: "runsc"}), http.StatusCreated, &sb)
	putFile(t, alice, sb.ID, "a.txt", "one")
	putFile(t, alice, sb.ID, "a.txt", "two")
	if c := history(t, alice, sb.ID).Checkpoints[0]; c.Cause != api.CauseAgentWrite {
		t.Fatalf("newest checkpoint %+v, want an agent-write", c)
	}
	restoreOp(t, alice, sb.ID, "undo", nil)
	if got := fileContent(t, alice, sb.ID, "a.txt"); got != "one" {
		t.Fatalf("undo under runsc: a.txt = %q, want \"one\"", got)
	}
	res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"ls", wire.HistoryPath}})
	if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "Permission denied") {
		t.Errorf("ls %s under runsc: exit %d, %q; want permission denied", wire.HistoryPath, res.ExitCode, res.Stderr)
	}
}

// A transaction through the API, on a real sandbox: its writes and execs make no
// checkpoint, a second begin and an undo are 409 naming it, the commit is one checkpoint,
// a rollback undoes what anyone changed since begin, and each step is audited.
func TestHistoryTransaction(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "tx"}), http.StatusCreated, &sb)
	base := "/api/v1/sandboxes/" + sb.ID + "/history"
	putFile(t, alice, sb.ID, "a.txt", "one")
	start := history(t, alice, sb.ID)
	if start.StoreBytes <= 0 || start.BudgetBytes < start.StoreBytes {
		t.Errorf("history's store: %d bytes of a %d budget", start.StoreBytes, start.BudgetBytes)
	}

	var tx api.Transaction
	servertest.Decode(t, alice.DoToken("POST", base+"/transaction", api.BeginRequest{Message: "refactor"}), http.StatusCreated, &tx)
	if tx.Base != start.Current || tx.Message != "refactor" {
		t.Fatalf("begin: %+v, want based on %s", tx, start.Current)
	}
	putFile(t, alice, sb.ID, "a.txt", "two")
	execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo b > b.txt"}})
	h := history(t, alice, sb.ID)
	if len(h.Checkpoints) != len(start.Checkpoints) || h.Transaction == nil || h.Transaction.ID != tx.ID {
		t.Fatalf("history in a transaction: %d checkpoints, transaction %+v; want %d and %s open", len(h.Checkpoints), h.Transaction, len(start.Checkpoints), tx.ID)
	}
	if e := servertest.ErrorOf(t, alice.DoToken("POST", base+"/transaction", nil), http.StatusConflict); !strings.Contains(e.Message, "transaction "+tx.ID+` ("refactor")`) {
		t.Errorf("second begin: %+v, want the open one named", e)
	}
	servertest.ErrorOf(t, alice.DoToken("POST", base+"/undo", nil), http.StatusConflict)
	servertest.ErrorOf(t, alice.DoToken("POST", base+"/transaction", strings.NewReader(`{"message": 1}`)), http.StatusBadRequest)

	var c api.CommitResult
	servertest.Decode(t, alice.DoToken("POST", base+"/transaction/commit", nil), http.StatusOK, &c)
	if !c.Created || c.Checkpoint.Cause != api.CauseTransaction || c.Checkpoint.Message != "refactor" || c.Checkpoint.Changed != 2 || c.Transaction.ID != tx.ID {
		t.Fatalf("commit: %+v, want one transaction checkpoint of 2 paths", c)
	}
	if e := servertest.ErrorOf(t, alice.DoToken("POST", base+"/transaction/commit", nil), http.StatusConflict); !strings.Contains(e.Message, "no transaction is open") {
		t.Errorf("commit with none open: %+v", e)
	}

	servertest.Decode(t, alice.DoToken("POST", base+"/transaction", nil), http.StatusCreated, &tx)
	putFile(t, alice, sb.ID, "a.txt", "three")
	execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "rm b.txt; mkdir -p d && echo x > d/x"}})
	var r api.RollbackResult
	servertest.Decode(t, alice.DoToken("POST", base+"/transaction/rollback", nil), http.StatusOK, &r)
	if r.Current != c.Checkpoint.ID || !r.AppRestarted {
		t.Fatalf("rollback: %+v, want back at %s with the app restarted", r, c.Checkpoint.ID)
	}
	for p, want := range map[string]string{"a.txt": "two", "b.txt": "b\n", "d/x": "<none>"} {
		if got := fileContent(t, alice, sb.ID, p); got != want {
			t.Errorf("after rollback %s = %q, want %q", p, got, want)
		}
	}
	servertest.ErrorOf(t, alice.DoToken("POST", base+"/transaction/rollback", nil), http.StatusConflict)

	var evs api.EventList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/events?limit=200", nil), http.StatusOK, &evs)
	seen := map[string]bool{}
	for _, ev := range evs.Events {
		seen[ev.Action] = true
	}
	for _, a := range []string{"sandbox.history_begin", "sandbox.history_commit", "sandbox.history_rollback"} {
		if !seen[a] {
			t.Errorf("no %s event in %v", a, seen)
		}
	}
}

// A sandbox's history moves to another sandbox: exported from one, imported into a new one,
// it gives the same timeline and workspace; a corrupt export is a 400 saying so, and an
// import into a history that is not empty a 409.
func TestHistoryExportImport(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var from, to api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "from"}), http.StatusCreated, &from)
	putFile(t, alice, from.ID, "a.txt", "one")
	putFile(t, alice, from.ID, "a.txt", "two")
	execIn(t, alice, from.ID, api.ExecRequest{Argv: []string{"sh", "-c", "mkdir -p d && echo b > d/b && ln -s a.txt l"}})
	src := history(t, alice, from.ID)

	resp := alice.DoToken("GET", "/api/v1/sandboxes/"+from.ID+"/history/export", nil)
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("export: %d %s", resp.StatusCode, data)
	}

	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "to"}), http.StatusCreated, &to)
	history(t, alice, to.ID) // its first checkpoint is in
	corrupt := bytes.Clone(data)
	corrupt[len(corrupt)/2] ^= 1
	for name, body := range map[string][]byte{"corrupt": corrupt, "truncated": data[:len(data)-10]} {
		if e := servertest.ErrorOf(t, alice.DoToken("POST", "/api/v1/sandboxes/"+to.ID+"/history/import", bytes.NewReader(body)), http.StatusBadRequest); !strings.Contains(e.Message, "history export is unusable") {
			t.Errorf("%s import: %+v", name, e)
		}
	}
	res := restoreOp(t, alice, to.ID, "import", bytes.NewReader(data))
	if res.Current != src.Current {
		t.Errorf("import: %+v, want at %s", res, src.Current)
	}
	for p, want := range map[string]string{"a.txt": "two", "d/b": "b\n"} {
		if got := fileContent(t, alice, to.ID, p); got != want {
			t.Errorf("imported %s = %q, want %q", p, got, want)
		}
	}
	if got := history(t, alice, to.ID); len(got.Checkpoints) != len(src.Checkpoints) || got.Current != src.Current {
		t.Errorf("imported history: %d checkpoints at %s, want %d at %s", len(got.Checkpoints), got.Current, len(src.Checkpoints), src.Current)
	}
	restoreOp(t, alice, to.ID, "undo", nil)
	if got := fileContent(t, alice, to.ID, "a.txt"); got != "two" || fileContent(t, alice, to.ID, "d/b") != "<none>" {
		t.Errorf("undo after import: a.txt %q", got)
	}
	if e := servertest.ErrorOf(t, alice.DoToken("POST", "/api/v1/sandboxes/"+from.ID+"/history/import", bytes.NewReader(data)), http.StatusConflict); !strings.Contains(e.Message, "not empty") {
		t.Errorf("import into a used history: %+v", e)
	}
}

// The app killed by the sandbox's own limits, as a container enforces them: the kernel's
// OOM killer under the memory limit, and a fork bomb under the pids limit. Each time the
// agent still answers, undo restores the files, and the app runs again on them.
func TestUndoAfterTheAppHitsItsLimits(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	for _, tc := range []struct{ name, bad string }{
		// The app itself doubles a string until the memory cgroup's OOM killer ends it.
		{"oom", `exec awk 'BEGIN { s = "x"; while (1) s = s s }'`},
		// Every fork past the pids limit fails; the shells left spin until killed.
		{"fork bomb", "b() { b | b & }; b; sleep 5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// On any v but "bad" the app is the welcome page (it listens, so the sandbox's
			// start does not wait for it); on "bad" it runs into its limit.
			app := `test "$(cat v 2>/dev/null)" = bad || exec ` + strings.Join(wire.WelcomeCommand(wire.AgentPath, 8080), " ") + `; ` + tc.bad + `; exit 7`
			var sb api.Sandbox
			servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{
				Limits: api.Limits{Memory: "96M", Pids: 64},
				App:    api.Template{Command: []string{"sh", "-c", app}, Port: 8080}}), http.StatusCreated, &sb)
			putFile(t, alice, sb.ID, "v", "good")
			putFile(t, alice, sb.ID, "v", "bad")
			// The app read v when it started; undo and redo restart it, on the bad file.
			restoreOp(t, alice, sb.ID, "undo", nil)
			restoreOp(t, alice, sb.ID, "redo", nil)
			// Wait for its run on the bad file to end: killed (9) or given up (7), not the
			// SIGTERM of a restart.
			var st api.AppStatus
			for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				st = api.AppStatus{}
				servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+sb.ID+"/app", nil), http.StatusOK, &st)
				if e := st.LastExit; e != nil && (e.Signal == 9 || e.ExitCode == 7 || e.ExitCode == 137) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the app on the bad file never ended: %+v", st)
				}
			}
			t.Logf("%s: the app ended %+v", tc.name, *st.LastExit)
			if tc.name == "oom" && st.LastExit.Signal != 9 && st.LastExit.ExitCode != 137 {
				t.Errorf("the app under a memory bomb ended %+v, want killed (SIGKILL by the OOM killer)", *st.LastExit)
			}
			// The agent answers, undo restores the good file, and the app runs on it.
			u := restoreOp(t, alice, sb.ID, "undo", nil)
			if got := fileContent(t, alice, sb.ID, "v"); got != "good" || !u.AppRestarted {
				t.Fatalf("undo after the app hit its limit: v = %q, %+v", got, u)
			}
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				st = api.AppStatus{}
				servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+sb.ID+"/app", nil), http.StatusOK, &st)
				if st.State == "running" && time.Since(st.Since) > time.Second {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the app did not run again on the restored file: %+v", st)
				}
			}
			if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"true"}}); res.ExitCode != 0 {
				t.Fatalf("exec after the app hit its limit: %+v", res)
			}
		})
	}
}
