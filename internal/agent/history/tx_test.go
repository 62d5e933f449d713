package history

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// setupTx makes a workspace with every kind of entry, checkpoints it, and returns its
// snapshot.
func setupTx(t *testing.T, ws string, h *History) (Checkpoint, map[string]node) {
	t.Helper()
	write(t, ws, "a", "old a", 0o644)
	write(t, ws, "dir/b", "old b", 0o644)
	write(t, ws, "dir/sub/c", "old c", 0o600)
	os.Symlink("dir/b", filepath.Join(ws, "link"))
	os.MkdirAll(filepath.Join(ws, "empty"), 0o755)
	c := mustCheckpoint(t, h, "old")
	return c, snapshot(t, ws)
}

// messTx changes every kind of entry setupTx made.
func messTx(t *testing.T, ws string) {
	t.Helper()
	os.RemoveAll(filepath.Join(ws, "dir"))
	os.RemoveAll(filepath.Join(ws, "empty"))
	os.Remove(filepath.Join(ws, "link"))
	write(t, ws, "a", "new a", 0o755)
	write(t, ws, "dir", "file where the dir was", 0o644)
	write(t, ws, "link", "file where the link was", 0o644)
	write(t, ws, "x/y/z", "new", 0o644)
}

func TestTransactionCommit(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	base, old := setupTx(t, ws, h)
	tx, err := h.Begin("build")
	if err != nil {
		t.Fatal(err)
	}
	if tx.Base != base.ID || tx.Message != "build" || tx.ID == "" {
		t.Fatalf("Begin = %+v, want based on %s", tx, base.ID)
	}
	messTx(t, ws)
	want := snapshot(t, ws)

	// Automatic checkpoints are suppressed; everything else that would record or restore is
	// refused, naming the open transaction.
	for _, cause := range []string{CauseWatcher, CauseExec, CauseAgentWrite} {
		c, created, err := h.Checkpoint(cause, "")
		if err != nil || created || c.ID != base.ID {
			t.Errorf("%s checkpoint in a transaction: %+v, %v, %v; want nothing recorded", cause, c, created, err)
		}
	}
	refused := []struct {
		name string
		call func() error
	}{
		{"manual checkpoint", func() error { _, _, err := h.Checkpoint(CauseManual, "m"); return err }},
		{"second begin", func() error { _, err := h.Begin("other"); return err }},
		{"undo", func() error { _, err := h.Undo(); return err }},
		{"redo", func() error { _, err := h.Redo(); return err }},
		{"restore", func() error { _, err := h.Restore(base.ID); return err }},
	}
	for _, r := range refused {
		err := r.call()
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), `transaction `+tx.ID+` ("build")`) {
			t.Errorf("%s in a transaction: %v, want FailedPrecondition naming %s", r.name, err, tx.ID)
		}
	}
	if got := snapshot(t, ws); !mapsEqual(got, want) {
		t.Fatalf("a refused call changed the workspace: %v", got)
	}

	c, created, err := h.Commit()
	if err != nil || !created {
		t.Fatalf("Commit = %+v, %v, %v", c, created, err)
	}
	if c.Cause != CauseTransaction || c.Message != "build" || c.Parent != base.ID || c.Transaction != tx.ID || c.Changed == 0 {
		t.Errorf("commit checkpoint %+v, want cause transaction, message build, after %s", c, base.ID)
	}
	if l := h.List(); len(l) != 2 || l[0].ID != c.ID {
		t.Errorf("timeline %+v, want the base and the commit only", l)
	}
	if _, open := h.Tx(); open {
		t.Error("transaction still open after commit")
	}
	if _, _, err := h.Commit(); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "no transaction is open") {
		t.Errorf("second commit: %v", err)
	}
	// One undo takes the whole transaction back.
	if _, err := h.Undo(); err != nil {
		t.Fatal(err)
	}
	if got := snapshot(t, ws); !mapsEqual(got, old) {
		t.Errorf("undo of the commit:\n got %v\nwant %v", got, old)
	}
	if _, err := h.Redo(); err != nil {
		t.Fatal(err)
	}
	if got := snapshot(t, ws); !mapsEqual(got, want) {
		t.Errorf("redo of the commit:\n got %v\nwant %v", got, want)
	}
}

func TestTransactionRollback(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	setupTx(t, ws, h)
	write(t, ws, "unsaved", "not checkpointed yet", 0o644) // part of the state at begin
	atBegin := snapshot(t, ws)
	tx, err := h.Begin("")
	if err != nil {
		t.Fatal(err)
	}
	before := h.List()
	if before[0].Cause != CauseWatcher || before[0].ID != tx.Base {
		t.Errorf("the unsaved change was not checkpointed before the transaction: %+v", before[0])
	}
	messTx(t, ws)
	os.Remove(filepath.Join(ws, "unsaved"))
	c, err := h.Rollback()
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != tx.Base {
		t.Errorf("Rollback = %+v, want the base %s", c, tx.Base)
	}
	if got := snapshot(t, ws); !mapsEqual(got, atBegin) {
		t.Errorf("after rollback:\n got %v\nwant %v", got, atBegin)
	}
	if after := h.List(); len(after) != len(before) {
		t.Errorf("rollback recorded checkpoints: %d, want %d", len(after), len(before))
	}
	if _, err := h.Rollback(); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("second rollback: %v, want FailedPrecondition", err)
	}
	// The history is usable again, and the rolled-back work left nothing to checkpoint.
	if _, created, err := h.Checkpoint(CauseWatcher, ""); err != nil || created {
		t.Errorf("checkpoint after rollback: created %v, %v; want nothing to record", created, err)
	}
}

func TestTransactionThatChangesNothing(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	write(t, ws, "a", "a", 0o644)
	base := mustCheckpoint(t, h, "a")
	if _, err := h.Begin("noop"); err != nil {
		t.Fatal(err)
	}
	c, created, err := h.Commit()
	if err != nil || created || c.ID != base.ID {
		t.Errorf("commit of nothing = %+v, %v, %v; want the base, not created", c, created, err)
	}
}

// TestTransactionLeftOpenIsRolledBack: a History closed (its agent crashed or stopped) with
// a transaction open is reopened with the workspace wholly as it was at begin.
func TestTransactionLeftOpenIsRolledBack(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	base, old := setupTx(t, ws, h)
	tx, err := h.Begin("half done")
	if err != nil {
		t.Fatal(err)
	}
	messTx(t, ws)
	h.Close()
	h2 := open(t, ws, store)
	if r := h2.Recovered(); !strings.Contains(r, "rolled back transaction "+tx.ID) || !strings.Contains(r, "wholly its state at the transaction's start") {
		t.Errorf("Recovered() = %q", r)
	}
	if got := snapshot(t, ws); !mapsEqual(got, old) {
		t.Errorf("after reopening:\n got %v\nwant %v", got, old)
	}
	if _, open := h2.Tx(); open {
		t.Error("transaction still open")
	}
	if cur, _ := h2.Current(); cur.ID != base.ID {
		t.Errorf("current %s, want %s", cur.ID, base.ID)
	}
}

// TestCrashDuringCommitAtEveryStep stops a commit at each of its crash points, as a SIGKILL
// would: once its journal is written the commit is finished by Open (the workspace, which a
// commit never touches, is wholly the committed state and recorded once), and Recovered
// says so. A crash before the journal is TestTransactionLeftOpenIsRolledBack.
func TestCrashDuringCommitAtEveryStep(t *testing.T) {
	for n := 1; ; n++ {
		ws, store := t.TempDir(), t.TempDir()
		h, err := Open(ws, store)
		if err != nil {
			t.Fatal(err)
		}
		base, _ := setupTx(t, ws, h)
		tx, err := h.Begin("build")
		if err != nil {
			t.Fatal(err)
		}
		messTx(t, ws)
		want := snapshot(t, ws)
		h.crashAfter = n
		_, _, err = h.Commit()
		h.Close()
		if err == nil {
			if n < 3 {
				t.Fatalf("the commit took only %d steps; the test tests nothing", n)
			}
			t.Logf("crashed at each of the commit's %d steps and recovered", n-1)
			return
		}
		if !errors.Is(err, errCrash) {
			t.Fatalf("crash after %d steps: %v", n, err)
		}
		h2, err := Open(ws, store)
		if err != nil {
			t.Fatalf("reopen after a crash at step %d: %v", n, err)
		}
		if r := h2.Recovered(); !strings.Contains(r, "commit of transaction "+tx.ID) || !strings.Contains(r, "wholly its committed state") {
			t.Errorf("crash at step %d: Recovered() = %q", n, r)
		}
		if got := snapshot(t, ws); !mapsEqual(got, want) {
			t.Errorf("crash at step %d, after recovery:\n got %v\nwant %v", n, got, want)
		}
		var commits int
		for _, c := range h2.List() {
			if c.Cause == CauseTransaction {
				commits++
				if c.Parent != base.ID || c.Transaction != tx.ID {
					t.Errorf("crash at step %d: commit checkpoint %+v", n, c)
				}
			}
		}
		if commits != 1 {
			t.Errorf("crash at step %d: %d commit checkpoints, want 1", n, commits)
		}
		if _, open := h2.Tx(); open {
			t.Errorf("crash at step %d: transaction still open", n)
		}
		h2.Close()
	}
}

// TestCrashDuringRollbackAtEveryStep stops a rollback after each change it makes to the
// workspace (and at its journal's crash points): Open finishes it, and the workspace is
// wholly its state at begin, never a mix.
func TestCrashDuringRollbackAtEveryStep(t *testing.T) {
	for n := 1; ; n++ {
		ws, store := t.TempDir(), t.TempDir()
		h, err := Open(ws, store)
		if err != nil {
			t.Fatal(err)
		}
		base, old := setupTx(t, ws, h)
		tx, err := h.Begin("")
		if err != nil {
			t.Fatal(err)
		}
		messTx(t, ws)
		h.crashAfter = n
		_, err = h.Rollback()
		h.Close()
		if err == nil {
			if n < 5 {
				t.Fatalf("the rollback took only %d steps; the test tests nothing", n)
			}
			t.Logf("crashed at each of the rollback's %d steps and recovered", n-1)
			return
		}
		if !errors.Is(err, errCrash) {
			t.Fatalf("crash after %d steps: %v", n, err)
		}
		h2, err := Open(ws, store)
		if err != nil {
			t.Fatalf("reopen after a crash at step %d: %v", n, err)
		}
		if r := h2.Recovered(); !strings.Contains(r, "rollback of transaction "+tx.ID) || !strings.Contains(r, "wholly its state at the transaction's start") {
			t.Errorf("crash at step %d: Recovered() = %q", n, r)
		}
		if got := snapshot(t, ws); !mapsEqual(got, old) {
			t.Errorf("crash at step %d, after recovery:\n got %v\nwant %v", n, got, old)
		}
		if cur, _ := h2.Current(); cur.ID != base.ID || len(h2.List()) != 1 {
			t.Errorf("crash at step %d: at %s with %d checkpoints, want only %s", n, cur.ID, len(h2.List()), base.ID)
		}
		h2.Close()
	}
}

// The SIGKILL test's child: it commits and rolls back transactions that each rewrite every
// file of the workspace with one generation number, until it is killed.
const (
	killChildEnv = "PADDOCK_HISTORY_KILL_CHILD"
	killFiles    = 12
)

func TestMain(m *testing.M) {
	if dirs := os.Getenv(killChildEnv); dirs != "" {
		ws, store, _ := strings.Cut(dirs, string(os.PathListSeparator))
		if err := killChild(ws, store); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func killChild(ws, store string) error {
	h, err := Open(ws, store)
	if err != nil {
		return err
	}
	for gen := 1; ; gen++ {
		if _, err := h.Begin("gen " + strconv.Itoa(gen)); err != nil {
			return err
		}
		for i := range killFiles {
			p := filepath.Join(ws, "d"+strconv.Itoa(i%3), "f"+strconv.Itoa(i))
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte(strconv.Itoa(gen)), 0o644); err != nil {
				return err
			}
		}
		if gen%3 == 0 {
			_, err = h.Rollback()
		} else {
			_, _, err = h.Commit()
		}
		if err != nil {
			return err
		}
	}
}

// TestSIGKILLDuringTransactions kills, with SIGKILL at random moments, a process that commits
// and rolls back transactions without pause, then reopens its store: recovery leaves every
// file of the workspace at one generation (never a mix of two transactions), equal to the
// current checkpoint.
func TestSIGKILLDuringTransactions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills processes for a few seconds")
	}
	ws, store := t.TempDir(), t.TempDir()
	recovered := map[string]int{}
	for round := range 12 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), killChildEnv+"="+ws+string(os.PathListSeparator)+store)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(100+round*37%200) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		if err := cmd.Wait(); err != nil && !strings.Contains(err.Error(), "killed") {
			t.Fatalf("round %d: child: %v: %s", round, err, stderr.String())
		}
		h, err := Open(ws, store)
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		r := h.Recovered()
		what := "nothing to recover"
		if f := strings.Fields(r); len(f) > 0 {
			what = strings.Join(f[:min(3, len(f))], " ")
		}
		recovered[what]++
		gens := map[string]bool{}
		for p, n := range snapshot(t, ws) {
			if n.kind == "f" {
				gens[n.data] = true
			} else if n.kind != "d" {
				t.Errorf("round %d: unexpected %s", round, p)
			}
		}
		if len(gens) > 1 {
			t.Fatalf("round %d: the workspace mixes generations %v after recovery (%q)", round, gens, r)
		}
		if _, started := h.Current(); !started {
			h.Close()
			continue // killed before its first checkpoint
		}
		if _, created, err := h.Checkpoint(CauseManual, "check"); err != nil || created {
			t.Fatalf("round %d: the workspace differs from its current checkpoint after recovery (%q): created %v, %v", round, r, created, err)
		}
		h.Close()
	}
	t.Logf("recoveries: %v", recovered)
}
