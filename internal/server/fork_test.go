package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
)

func checkpointIn(t *testing.T, c *servertest.Client, id, msg string) api.Checkpoint {
	t.Helper()
	var res api.CheckpointResult
	servertest.Decode(t, c.DoToken("POST", "/api/v1/sandboxes/"+id+"/history/checkpoints", api.CheckpointRequest{Message: msg}), http.StatusOK, &res)
	return res.Checkpoint
}

func catIn(t *testing.T, c *servertest.Client, id, path string) string {
	t.Helper()
	return string(execIn(t, c, id, api.ExecRequest{Argv: []string{"cat", path}}).Stdout)
}

// A fork is a new sandbox of the same owner whose workspace and history start from the
// checkpoint asked for, independent of its source; a checkpoint that does not exist is a
// 404 naming it; with a transaction open the fork starts from the state before it, and
// says so; another user's sandbox cannot be forked.
func TestSandboxFork(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var src api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "src"}), http.StatusCreated, &src)
	execIn(t, alice, src.ID, api.ExecRequest{Argv: []string{"sh", "-c", "mkdir -p d && echo one > d/a.txt && echo keep > b.txt"}})
	first := checkpointIn(t, alice, src.ID, "first")
	execIn(t, alice, src.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo two > d/a.txt"}})
	second := checkpointIn(t, alice, src.ID, "second")
	if first.ID == "" || second.ID == first.ID {
		t.Fatalf("checkpoints %+v %+v", first, second)
	}

	var res api.ForkResult
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+src.ID+"/fork", api.ForkRequest{At: first.ID}), http.StatusCreated, &res)
	fork := res.Sandbox
	if fork.ID == src.ID || fork.Owner != alice.User.ID || fork.State != api.StateRunning || res.At != first.ID || res.From != src.ID || res.Note != "" {
		t.Fatalf("fork %+v", res)
	}
	if got := catIn(t, alice, fork.ID, "d/a.txt"); got != "one\n" {
		t.Errorf("the fork's d/a.txt: %q, want the first checkpoint's", got)
	}
	if res.SharedBlobs+res.ClonedBlobs == 0 {
		t.Errorf("the fork shares no blob with its source: %+v", res)
	}
	execIn(t, alice, fork.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo fork > d/a.txt && echo fork > b.txt"}})
	if got := catIn(t, alice, src.ID, "d/a.txt") + catIn(t, alice, src.ID, "b.txt"); got != "two\nkeep\n" {
		t.Errorf("the source changed with its fork: %q", got)
	}
	var h api.History
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+fork.ID+"/history", nil), http.StatusOK, &h)
	ids := map[string]bool{}
	for _, c := range h.Checkpoints {
		ids[c.ID] = true
	}
	if !ids[first.ID] || !ids[second.ID] {
		t.Errorf("the fork's history lacks its source's checkpoints: %+v", h.Checkpoints)
	}
	// The fork undoes into its source's past.
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+fork.ID+"/history/restore", api.RestoreRequest{Checkpoint: second.ID}), http.StatusOK, nil)
	if got := catIn(t, alice, fork.ID, "d/a.txt"); got != "two\n" {
		t.Errorf("the fork restored to the second checkpoint holds %q", got)
	}

	// The source still reads the blobs it shares with its running fork.
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+src.ID+"/history/restore", api.RestoreRequest{Checkpoint: first.ID}), http.StatusOK, nil)
	if got := catIn(t, alice, src.ID, "d/a.txt"); got != "one\n" {
		t.Errorf("the source restored to the first checkpoint after its fork holds %q", got)
	}
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+src.ID+"/history/restore", api.RestoreRequest{Checkpoint: second.ID}), http.StatusOK, nil)

	if e := servertest.ErrorOf(t, alice.DoToken("POST", "/api/v1/sandboxes/"+src.ID+"/fork", api.ForkRequest{At: "cp-nope"}), http.StatusNotFound); !strings.Contains(e.Message, "cp-nope") {
		t.Errorf("fork of a missing checkpoint: %+v", e)
	}
	bob := e.Register(t, "bob")
	servertest.ErrorOf(t, bob.DoToken("POST", "/api/v1/sandboxes/"+src.ID+"/fork", api.ForkRequest{}), http.StatusNotFound)

	var tx api.Transaction
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+src.ID+"/history/transaction", api.BeginRequest{Message: "half done"}), http.StatusCreated, &tx)
	execIn(t, alice, src.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo inside > d/a.txt"}})
	var during api.ForkResult
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+src.ID+"/fork", api.ForkRequest{}), http.StatusCreated, &during)
	if during.At != tx.Base || !strings.Contains(during.Note, tx.ID) {
		t.Errorf("fork during a transaction: %+v (transaction %+v)", during, tx)
	}
	if got := catIn(t, alice, during.Sandbox.ID, "d/a.txt"); got != "two\n" {
		t.Errorf("the fork during a transaction holds %q, want the state before it", got)
	}
}
