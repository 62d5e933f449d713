package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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
	if during.At != tx.Base || !strings.Contains(during.Note, tx.ID) || during.Workspace != api.ForkDiskCopy {
		t.Errorf("fork during a transaction: %+v (transaction %+v)", during, tx)
	}
	if got := catIn(t, alice, during.Sandbox.ID, "d/a.txt"); got != "two\n" {
		t.Errorf("the fork during a transaction holds %q, want the state before it", got)
	}
}

// A fork of a sandbox with a disk image starts from a sparse copy of the image, the
// checkpoint restored over it: with a file being written in the source meanwhile, the
// fork is exactly its checkpoint, and the writer in the source goes on; a fork at an older
// checkpoint is that one's state, its unchanged files not written again; the image copy is
// as sparse as its source.
func TestSandboxForkDiskCopy(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var src api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "src"}), http.StatusCreated, &src)
	execIn(t, alice, src.ID, api.ExecRequest{Argv: []string{"sh", "-c", "head -c 16777216 /dev/urandom > big.bin && mkdir d && echo one > d/a.txt"}})
	first := checkpointIn(t, alice, src.ID, "first")
	execIn(t, alice, src.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo two > d/a.txt && echo new > added.txt"}})
	checkpointIn(t, alice, src.ID, "second")
	sum := func(id string) string {
		return string(execIn(t, alice, id, api.ExecRequest{Argv: []string{"sha256sum", "big.bin"}}).Stdout)
	}
	bigSum := sum(src.ID)

	// A writer in the source, running until it sees stop.
	wrote := make(chan error, 1)
	go func() {
		res := alice.DoToken("POST", "/api/v1/sandboxes/"+src.ID+"/exec", api.ExecRequest{Argv: []string{"sh", "-c",
			"i=0; while [ ! -e stop ]; do i=$((i+1)); echo $i > w.txt; head -c 4096 /dev/urandom > w.bin; done; echo $i"}})
		defer res.Body.Close()
		var out api.ExecResult
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != http.StatusOK || out.ExitCode != 0 {
			wrote <- fmt.Errorf("status %d, %+v, %v", res.StatusCode, out, err)
			return
		}
		wrote <- nil
	}()
	for catIn(t, alice, src.ID, "w.txt") == "" {
		time.Sleep(20 * time.Millisecond)
	}

	var res api.ForkResult
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+src.ID+"/fork", api.ForkRequest{}), http.StatusCreated, &res)
	if res.Workspace != api.ForkDiskCopy || res.Sandbox.State != api.StateRunning {
		t.Fatalf("fork %+v: want a copy of the disk image, running", res)
	}
	// The fork's workspace is its checkpoint exactly: a scan of it finds no change.
	after := checkpointIn(t, alice, res.Sandbox.ID, "after the fork")
	var diff api.HistoryDiff
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+res.Sandbox.ID+"/history/diff?from="+res.At+"&to="+after.ID, nil), http.StatusOK, &diff)
	if len(diff.Added)+len(diff.Changed)+len(diff.Removed) != 0 {
		t.Errorf("the fork differs from its checkpoint %s: %+v", res.At, diff)
	}
	if got := catIn(t, alice, res.Sandbox.ID, "d/a.txt"); got != "two\n" {
		t.Errorf("the fork's d/a.txt: %q", got)
	}

	// The source ran on and is untouched.
	execIn(t, alice, src.ID, api.ExecRequest{Argv: []string{"touch", "stop"}})
	if err := <-wrote; err != nil {
		t.Fatalf("the source's writer: %v", err)
	}
	if got := catIn(t, alice, src.ID, "d/a.txt") + catIn(t, alice, src.ID, "added.txt"); got != "two\nnew\n" {
		t.Errorf("the source changed with its fork: %q", got)
	}

	// At an older checkpoint: its state, the files it shares with the copy not rewritten.
	var old api.ForkResult
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+src.ID+"/fork", api.ForkRequest{At: first.ID}), http.StatusCreated, &old)
	if old.Workspace != api.ForkDiskCopy || old.At != first.ID {
		t.Fatalf("fork at %s: %+v", first.ID, old)
	}
	got := execIn(t, alice, old.Sandbox.ID, api.ExecRequest{Argv: []string{"sh", "-c", "cat d/a.txt; ls"}})
	if string(got.Stdout) != "one\nbig.bin\nd\n" {
		t.Errorf("the fork at the first checkpoint holds %q", got.Stdout)
	}
	if sum(old.Sandbox.ID) != bigSum {
		t.Errorf("the fork's big.bin differs from its source's")
	}
	inode := func(id string) string {
		return strings.TrimSpace(string(execIn(t, alice, id, api.ExecRequest{Argv: []string{"stat", "-c", "%i", "big.bin"}}).Stdout))
	}
	if a, b := inode(src.ID), inode(old.Sandbox.ID); a != b {
		t.Errorf("the fork wrote big.bin again (inode %s, its source's %s): the restore over the copy rewrote an unchanged file", b, a)
	}

	// Sparse: the fork's image takes what its source's does, not its size.
	image := func(id string) syscall.Stat_t {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(e.Config.Runner.WorkspaceRoot, "alice", "disks", id+".img"), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	s, f := image(src.ID), image(old.Sandbox.ID)
	if f.Blocks*512 < 16<<20 || f.Blocks > s.Blocks+s.Blocks/2 || f.Blocks*512 > f.Size/4 {
		t.Errorf("the fork's image holds %d bytes of %d, its source's %d: not a sparse copy", f.Blocks*512, f.Size, s.Blocks*512)
	}

	// A stopped source is forked from its image too, and stays stopped.
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+src.ID+"/stop", nil), http.StatusOK, nil)
	var stopped api.ForkResult
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+src.ID+"/fork", api.ForkRequest{At: first.ID}), http.StatusCreated, &stopped)
	if stopped.Workspace != api.ForkDiskCopy || catIn(t, alice, stopped.Sandbox.ID, "d/a.txt") != "one\n" {
		t.Errorf("fork of the stopped source: %+v", stopped)
	}
	var again api.Sandbox
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+src.ID, nil), http.StatusOK, &again)
	if again.State != api.StateStopped {
		t.Errorf("the stopped source is %s after its fork", again.State)
	}
}

// A fork of a running source at its checkpoint, untouched since, is proven to be it while
// the source is frozen for the copy (its event says so), so the copy is not walked: the
// fork is exactly the checkpoint, undo in it goes into its source's past, and once the
// source is deleted the fork still restores every checkpoint.
func TestSandboxForkProvenCopy(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var src api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "src"}), http.StatusCreated, &src)
	execIn(t, alice, src.ID, api.ExecRequest{Argv: []string{"sh", "-c", "mkdir -p d/e && echo one > d/a.txt && echo keep > d/e/b.txt && ln -s d/a.txt link"}})
	first := checkpointIn(t, alice, src.ID, "first")
	execIn(t, alice, src.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo two > d/a.txt && echo new > added.txt"}})
	// Past the history's racy window, so that the checkpoint the fork takes first caches
	// every file's stat.
	time.Sleep(500 * time.Millisecond)

	var res api.ForkResult
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+src.ID+"/fork", api.ForkRequest{}), http.StatusCreated, &res)
	if res.Workspace != api.ForkDiskCopy || res.Sandbox.State != api.StateRunning {
		t.Fatalf("fork %+v: want a copy of the disk image, running", res)
	}
	var evs api.EventList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/events?action=sandbox.fork", nil), http.StatusOK, &evs)
	proven := 0
	for _, ev := range evs.Events {
		if ev.Detail["workspace"] == string(api.ForkDiskCopy) && ev.Detail["proven"] == true {
			proven++
		}
	}
	if proven != 1 {
		t.Fatalf("the fork was not proven: %+v", evs.Events)
	}
	fork := res.Sandbox.ID
	after := checkpointIn(t, alice, fork, "after the fork")
	var diff api.HistoryDiff
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+fork+"/history/diff?from="+res.At+"&to="+after.ID, nil), http.StatusOK, &diff)
	if len(diff.Added)+len(diff.Changed)+len(diff.Removed) != 0 {
		t.Errorf("the proven fork differs from its checkpoint %s: %+v", res.At, diff)
	}
	if got := catIn(t, alice, fork, "d/a.txt") + catIn(t, alice, fork, "added.txt") + catIn(t, alice, fork, "link"); got != "two\nnew\ntwo\n" {
		t.Errorf("the proven fork holds %q", got)
	}

	// The source goes; the fork's history does not need it.
	servertest.Decode(t, alice.DoToken("DELETE", "/api/v1/sandboxes/"+src.ID, nil), http.StatusNoContent, nil)
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+fork+"/history/restore", api.RestoreRequest{Checkpoint: first.ID}), http.StatusOK, nil)
	got := execIn(t, alice, fork, api.ExecRequest{Argv: []string{"sh", "-c", "cat d/a.txt d/e/b.txt; ls"}})
	if string(got.Stdout) != "one\nkeep\nd\nlink\n" {
		t.Errorf("the fork at its source's first checkpoint holds %q", got.Stdout)
	}
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+fork+"/history/undo", nil), http.StatusOK, nil)
	if got := catIn(t, alice, fork, "added.txt"); got != "new\n" {
		t.Errorf("undo in the fork: added.txt %q", got)
	}
}
