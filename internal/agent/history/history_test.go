package history

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// node is a file system entry as the tests see it.
type node struct {
	kind   string // f, d, l
	mode   fs.FileMode
	data   string
	target string
}

// snapshot reads dir without following symlinks.
func snapshot(t *testing.T, dir string) map[string]node {
	t.Helper()
	out := map[string]node{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			tg, _ := os.Readlink(p)
			out[rel] = node{kind: "l", target: tg}
		case fi.IsDir():
			out[rel] = node{kind: "d", mode: fi.Mode() & modeBits}
		default:
			b, _ := os.ReadFile(p)
			out[rel] = node{kind: "f", mode: fi.Mode() & modeBits, data: string(b)}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func write(t *testing.T, dir, rel, data string, mode fs.FileMode) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func open(t *testing.T, ws, store string) *History {
	t.Helper()
	h, err := Open(ws, store)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func mustCheckpoint(t *testing.T, h *History, msg string) Checkpoint {
	t.Helper()
	c, created, err := h.Checkpoint(CauseManual, msg)
	if err != nil {
		t.Fatal(err)
	}
	if !created {
		t.Fatalf("checkpoint %q: nothing recorded", msg)
	}
	return c
}

func countBlobs(t *testing.T, store string) int {
	t.Helper()
	n := 0
	filepath.WalkDir(filepath.Join(store, objectsDir), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	return n
}

func TestRoundTrip(t *testing.T) {
	outside := t.TempDir()
	write(t, outside, "secret", "outside", 0o600)
	binary := string([]byte{0, 1, 2, 0xff, 0xfe, '\n', 0})

	tests := []struct {
		name  string
		setup func(t *testing.T, ws string) // the state checkpointed
		mess  func(t *testing.T, ws string) // what happens afterwards
	}{
		{"regular files", func(t *testing.T, ws string) {
			write(t, ws, "a.txt", "hello", 0o644)
			write(t, ws, "src/main.go", "package main", 0o644)
		}, func(t *testing.T, ws string) {
			write(t, ws, "a.txt", "changed", 0o644)
			write(t, ws, "new.txt", "new", 0o644)
		}},
		{"binary file", func(t *testing.T, ws string) {
			write(t, ws, "bin", binary, 0o644)
		}, func(t *testing.T, ws string) {
			write(t, ws, "bin", "text now", 0o644)
		}},
		{"empty dir", func(t *testing.T, ws string) {
			os.MkdirAll(filepath.Join(ws, "empty/inner"), 0o755)
		}, func(t *testing.T, ws string) {
			os.RemoveAll(filepath.Join(ws, "empty"))
			write(t, ws, "empty", "now a file", 0o644)
		}},
		{"symlinks as links, never followed", func(t *testing.T, ws string) {
			write(t, ws, "target.txt", "t", 0o644)
			os.Symlink("target.txt", filepath.Join(ws, "rel"))
			os.Symlink(filepath.Join(outside, "secret"), filepath.Join(ws, "out"))
			os.Symlink(outside, filepath.Join(ws, "outdir"))
		}, func(t *testing.T, ws string) {
			os.Remove(filepath.Join(ws, "rel"))
			write(t, ws, "rel", "a file now", 0o644)
			os.Remove(filepath.Join(ws, "out"))
			os.Symlink("elsewhere", filepath.Join(ws, "out"))
			os.Remove(filepath.Join(ws, "outdir"))
		}},
		{"mode bits", func(t *testing.T, ws string) {
			write(t, ws, "run.sh", "#!/bin/sh", 0o755)
			write(t, ws, "private", "p", 0o600)
			os.MkdirAll(filepath.Join(ws, "d"), 0o750)
			os.Chmod(filepath.Join(ws, "d"), 0o750)
		}, func(t *testing.T, ws string) {
			os.Chmod(filepath.Join(ws, "run.sh"), 0o644)
			os.Chmod(filepath.Join(ws, "private"), 0o666)
			os.Chmod(filepath.Join(ws, "d"), 0o777)
		}},
		{"deleted file", func(t *testing.T, ws string) {
			write(t, ws, "keep", "k", 0o644)
			write(t, ws, "gone", "g", 0o644)
		}, func(t *testing.T, ws string) {
			os.Remove(filepath.Join(ws, "gone"))
		}},
		{"nested deleted dir", func(t *testing.T, ws string) {
			write(t, ws, "a/b/c/deep.txt", "deep", 0o644)
			write(t, ws, "a/b/sib.txt", "sib", 0o644)
		}, func(t *testing.T, ws string) {
			os.RemoveAll(filepath.Join(ws, "a/b"))
			write(t, ws, "a/b", "file where a dir was", 0o644)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws, store := t.TempDir(), t.TempDir()
			tt.setup(t, ws)
			want := snapshot(t, ws)
			h := open(t, ws, store)
			c := mustCheckpoint(t, h, "before")
			tt.mess(t, ws)
			mustCheckpoint(t, h, "after")
			if _, err := h.Restore(c.ID); err != nil {
				t.Fatal(err)
			}
			if got := snapshot(t, ws); !mapsEqual(got, want) {
				t.Errorf("restored workspace:\n got %v\nwant %v", got, want)
			}
			if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "outside" {
				t.Errorf("file outside the workspace changed: %q", b)
			}
		})
	}
}

func mapsEqual(a, b map[string]node) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestUnchangedWorkspaceRecordsNothing(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	write(t, ws, "a", "a", 0o644)
	h := open(t, ws, store)
	first := mustCheckpoint(t, h, "one")
	// Only mtime changes: not a change of content.
	os.Chtimes(filepath.Join(ws, "a"), time.Now(), time.Now().Add(time.Hour))
	c, created, err := h.Checkpoint(CauseExec, "again")
	if err != nil {
		t.Fatal(err)
	}
	if created || c.ID != first.ID {
		t.Errorf("Checkpoint on an unchanged workspace = %+v, created %v; want %s, false", c, created, first.ID)
	}
	if n := len(h.List()); n != 1 {
		t.Errorf("List has %d checkpoints, want 1", n)
	}
}

func TestIdenticalContentStoredOnce(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	big := strings.Repeat("same content ", 1000)
	for _, p := range []string{"a", "b", "d/c", "d/e/f"} {
		write(t, ws, p, big, 0o644)
	}
	h := open(t, ws, store)
	mustCheckpoint(t, h, "one")
	// 1 content blob + trees for ".", "d", "d/e".
	if n := countBlobs(t, store); n != 4 {
		t.Errorf("%d blobs, want 4 (one for the shared content, three trees)", n)
	}
	write(t, ws, "g", big, 0o644) // same content again: only the root tree is new
	mustCheckpoint(t, h, "two")
	if n := countBlobs(t, store); n != 5 {
		t.Errorf("%d blobs after adding a duplicate, want 5", n)
	}
}

func TestUndoRedoFork(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	read := func() string { b, _ := os.ReadFile(filepath.Join(ws, "f")); return string(b) }

	var ids []string
	for _, v := range []string{"1", "2", "3"} {
		write(t, ws, "f", v, 0o644)
		ids = append(ids, mustCheckpoint(t, h, v).ID)
	}
	steps := []struct {
		op      func() (Checkpoint, error)
		name    string
		want    string
		wantErr string
	}{
		{h.Redo, "redo with nothing undone", "3", "nothing to redo"},
		{h.Undo, "undo", "2", ""},
		{h.Undo, "undo again", "1", ""},
		{h.Undo, "undo past the first", "1", "nothing to undo: checkpoint " + ids[0] + " is the first"},
		{h.Redo, "redo", "2", ""},
		{h.Redo, "redo again", "3", ""},
		{h.Redo, "redo past the last", "3", "nothing to redo"},
		{h.Undo, "undo before the fork", "2", ""},
	}
	for _, s := range steps {
		_, err := s.op()
		if s.wantErr == "" && err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if s.wantErr != "" && (err == nil || !strings.Contains(err.Error(), s.wantErr) || !errors.Is(err, errdefs.ErrFailedPrecondition)) {
			t.Fatalf("%s: err %v, want FailedPrecondition containing %q", s.name, err, s.wantErr)
		}
		if got := read(); got != s.want {
			t.Fatalf("%s: workspace has %q, want %q", s.name, got, s.want)
		}
	}
	write(t, ws, "f", "fork", 0o644)
	fork := mustCheckpoint(t, h, "fork")
	_, err := h.Redo()
	if err == nil || !strings.Contains(err.Error(), "checkpoint "+fork.ID+" changed the workspace after the last undo") {
		t.Fatalf("redo after a fork: %v", err)
	}
	if _, err := h.Undo(); err != nil || read() != "2" {
		t.Fatalf("undo after the fork: %v, workspace %q, want 2", err, read())
	}
	var restores int
	for _, c := range h.List() {
		if c.Cause == CauseRestore {
			restores++
		}
	}
	if restores != 6 {
		t.Errorf("timeline has %d restore checkpoints, want 6 (one per undo and redo)", restores)
	}
	if l := h.List(); l[0].Time.Before(l[len(l)-1].Time) {
		t.Errorf("List is not newest first")
	}
}

func TestUncheckpointedChangesSurviveUndo(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	write(t, ws, "f", "1", 0o644)
	mustCheckpoint(t, h, "1")
	write(t, ws, "f", "unsaved", 0o644)
	if _, err := h.Undo(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Redo(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "f")); string(b) != "unsaved" {
		t.Errorf("after undo+redo f = %q, want the unsaved change back", b)
	}
}

func TestErrors(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	write(t, ws, "a", "a", 0o644)
	c := mustCheckpoint(t, h, "a")
	tests := []struct {
		name string
		call func() error
		kind error
		text string
	}{
		{"restore unknown", func() error { _, err := h.Restore("999"); return err }, errdefs.ErrNotFound, `"999"`},
		{"diff unknown", func() error { _, err := h.Diff(c.ID, "nope"); return err }, errdefs.ErrNotFound, `"nope"`},
		{"bad cause", func() error { _, _, err := h.Checkpoint("whim", ""); return err }, errdefs.ErrInvalidArgument, "whim"},
		{"second open", func() error { _, err := Open(ws, store); return err }, errdefs.ErrFailedPrecondition, "in use"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if !errors.Is(err, tt.kind) || !strings.Contains(err.Error(), tt.text) {
				t.Errorf("err = %v, want %v naming %s", err, tt.kind, tt.text)
			}
		})
	}
}

func TestDiff(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	write(t, ws, "same", "s", 0o644)
	write(t, ws, "edit", "1", 0o644)
	write(t, ws, "gone/x", "x", 0o644)
	a := mustCheckpoint(t, h, "a")
	write(t, ws, "edit", "2", 0o644)
	os.RemoveAll(filepath.Join(ws, "gone"))
	write(t, ws, "new/y", "y", 0o644)
	b := mustCheckpoint(t, h, "b")
	d, err := h.Diff(a.ID, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := DiffResult{Added: []string{"new", "new/y"}, Changed: []string{"edit"}, Removed: []string{"gone", "gone/x"}}
	if !slices.Equal(d.Added, want.Added) || !slices.Equal(d.Changed, want.Changed) || !slices.Equal(d.Removed, want.Removed) {
		t.Errorf("Diff = %+v, want %+v", d, want)
	}
	if b.Changed != 5 {
		t.Errorf("Changed = %d, want 5", b.Changed)
	}
}

// TestNeverWritesThroughSymlinkedDir: a directory of the checkpoint replaced by a symlink to
// a directory outside the workspace must be restored as a directory, leaving the outside
// alone.
func TestNeverWritesThroughSymlinkedDir(t *testing.T) {
	ws, store, outside := t.TempDir(), t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	write(t, ws, "d/f", "inside", 0o644)
	c := mustCheckpoint(t, h, "a")
	os.RemoveAll(filepath.Join(ws, "d"))
	os.Symlink(outside, filepath.Join(ws, "d"))
	if _, err := h.Restore(c.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(outside, "f")); err == nil {
		t.Fatal("restore wrote through a symlink out of the workspace")
	}
	fi, err := os.Lstat(filepath.Join(ws, "d"))
	if err != nil || !fi.IsDir() {
		t.Fatalf("d is not a directory again: %v %v", fi, err)
	}
}

func TestCrashRecovery(t *testing.T) {
	// Each case half-applies a restore to "old" before the crash.
	tests := []struct {
		name      string
		halfApply func(t *testing.T, ws string)
	}{
		{"journal written, nothing applied", func(t *testing.T, ws string) {}},
		{"some files restored", func(t *testing.T, ws string) {
			write(t, ws, "a", "old a", 0o644)
			os.MkdirAll(filepath.Join(ws, "dir"), 0o755)
		}},
		{"everything applied, but not yet recorded", func(t *testing.T, ws string) {
			os.Remove(filepath.Join(ws, "c"))
			write(t, ws, "a", "old a", 0o644)
			write(t, ws, "dir/b", "old b", 0o644)
		}},
		{"leftover temp file", func(t *testing.T, ws string) {
			write(t, ws, tempPrefix+"dead", "half", 0o600)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws, store := t.TempDir(), t.TempDir()
			h := open(t, ws, store)
			write(t, ws, "a", "old a", 0o644)
			write(t, ws, "dir/b", "old b", 0o644)
			old := mustCheckpoint(t, h, "old")
			want := snapshot(t, ws)
			os.RemoveAll(filepath.Join(ws, "dir"))
			write(t, ws, "a", "new a", 0o644)
			write(t, ws, "c", "new c", 0o644)
			mustCheckpoint(t, h, "new")
			seq := h.idx.Seq
			h.Close()

			if err := writeJSON(filepath.Join(store, journalFile), journal{Op: opRestore, Target: old.ID, Seq: seq}); err != nil {
				t.Fatal(err)
			}
			tt.halfApply(t, ws)

			h2 := open(t, ws, store)
			if !strings.Contains(h2.Recovered(), "restore to checkpoint "+old.ID) {
				t.Errorf("Recovered() = %q", h2.Recovered())
			}
			if got := snapshot(t, ws); !mapsEqual(got, want) {
				t.Errorf("after recovery:\n got %v\nwant %v", got, want)
			}
			if _, err := os.Stat(filepath.Join(store, journalFile)); err == nil {
				t.Error("journal left behind")
			}
			if l := h2.List(); l[0].Cause != CauseRestore || l[0].Restores != old.ID {
				t.Errorf("newest checkpoint %+v, want the recovered restore", l[0])
			}
			h2.Close()
			h3 := open(t, ws, store)
			if h3.Recovered() != "" {
				t.Errorf("second open recovered again: %q", h3.Recovered())
			}
		})
	}
}

func TestCorruptBlobIsDataLoss(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	write(t, ws, "a", "content", 0o644)
	c := mustCheckpoint(t, h, "a")
	write(t, ws, "a", "other", 0o644)
	mustCheckpoint(t, h, "b")
	p := h.blobs.path(sumHex([]byte("content")))
	if err := os.WriteFile(p, bytes.Repeat([]byte("x"), 7), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := h.Restore(c.ID)
	if !errors.Is(err, errdefs.ErrDataLoss) {
		t.Fatalf("restore from a corrupt blob: %v, want ErrDataLoss", err)
	}
}

// TestCrashAtEveryStep stops a restore after 1, 2, … changes to the workspace, as a SIGKILL
// would, and checks that reopening the history finishes it: the workspace is wholly the
// target state, never a mix.
func TestCrashAtEveryStep(t *testing.T) {
	for n := 1; ; n++ {
		ws, store := t.TempDir(), t.TempDir()
		h, err := Open(ws, store)
		if err != nil {
			t.Fatal(err)
		}
		write(t, ws, "a", "old a", 0o644)
		write(t, ws, "dir/b", "old b", 0o644)
		write(t, ws, "dir/sub/c", "old c", 0o600)
		os.Symlink("dir/b", filepath.Join(ws, "link"))
		os.MkdirAll(filepath.Join(ws, "empty"), 0o755)
		old := mustCheckpoint(t, h, "old")
		want := snapshot(t, ws)
		os.RemoveAll(filepath.Join(ws, "dir"))
		os.RemoveAll(filepath.Join(ws, "empty"))
		os.Remove(filepath.Join(ws, "link"))
		write(t, ws, "a", "new a", 0o755)
		write(t, ws, "dir", "file where the dir was", 0o644)
		write(t, ws, "link", "file where the link was", 0o644)
		write(t, ws, "x/y/z", "new", 0o644)
		mustCheckpoint(t, h, "new")

		h.crashAfter = n
		_, err = h.Restore(old.ID)
		h.Close()
		if err == nil {
			if n < 3 {
				t.Fatalf("the restore took only %d steps; the test tests nothing", n)
			}
			t.Logf("crashed at each of the restore's %d steps and recovered", n-1)
			return // n is past the last step: every earlier point was tested
		}
		if !errors.Is(err, errCrash) {
			t.Fatalf("crash after %d steps: %v", n, err)
		}
		h2, err := Open(ws, store)
		if err != nil {
			t.Fatalf("reopen after a crash at step %d: %v", n, err)
		}
		if h2.Recovered() == "" {
			t.Errorf("crash at step %d: Recovered() is empty", n)
		}
		if got := snapshot(t, ws); !mapsEqual(got, want) {
			t.Errorf("crash at step %d, after recovery:\n got %v\nwant %v", n, got, want)
		}
		h2.Close()
	}
}

// TestRestoreSkipsUnchangedSubtrees: undoing an edit in one directory leaves the files of
// the others alone (same inode), so an undo costs what it changes.
func TestRestoreSkipsUnchangedSubtrees(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	write(t, ws, "keep/k", "k", 0o644)
	write(t, ws, "edit/e", "1", 0o644)
	write(t, ws, "edit/same", "s", 0o644)
	mustCheckpoint(t, h, "1")
	before := map[string]uint64{}
	for _, p := range []string{"keep/k", "edit/same"} {
		before[p] = inode(t, filepath.Join(ws, p))
	}
	write(t, ws, "edit/e", "2", 0o644)
	time.Sleep(2 * racyWindow) // let the files' stat be trusted
	if _, err := h.Undo(); err != nil {
		t.Fatal(err)
	}
	for p, ino := range before {
		if got := inode(t, filepath.Join(ws, p)); got != ino {
			t.Errorf("%s was rewritten by an undo that did not change it", p)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "edit/e")); string(b) != "1" {
		t.Errorf("edit/e = %q after undo, want 1", b)
	}
}

func inode(t *testing.T, p string) uint64 {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func TestRestoresIntoReadOnlyDir(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	write(t, ws, "ro/f", "1", 0o644)
	os.Chmod(filepath.Join(ws, "ro"), 0o555)
	t.Cleanup(func() { os.Chmod(filepath.Join(ws, "ro"), 0o755) })
	c := mustCheckpoint(t, h, "1")
	os.Chmod(filepath.Join(ws, "ro"), 0o755)
	write(t, ws, "ro/f", "2", 0o644)
	write(t, ws, "ro/g", "new", 0o644)
	os.Chmod(filepath.Join(ws, "ro"), 0o555)
	if _, err := h.Restore(c.ID); err != nil {
		t.Fatal(err)
	}
	got := snapshot(t, filepath.Join(ws, "ro"))
	if len(got) != 1 || got["f"].data != "1" {
		t.Errorf("ro restored as %v", got)
	}
	if fi, _ := os.Stat(filepath.Join(ws, "ro")); fi.Mode().Perm() != 0o555 {
		t.Errorf("ro has mode %v, want 0555", fi.Mode().Perm())
	}
}

// TestRecoveryAfterRecordedRestore: the crash came after the restore was recorded but before
// the journal was removed; reopening must not record it twice.
func TestRecoveryAfterRecordedRestore(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	write(t, ws, "a", "1", 0o644)
	old := mustCheckpoint(t, h, "1")
	write(t, ws, "a", "2", 0o644)
	mustCheckpoint(t, h, "2")
	seq := h.idx.Seq
	if _, err := h.Restore(old.ID); err != nil {
		t.Fatal(err)
	}
	n := len(h.List())
	h.Close()
	if err := writeJSON(filepath.Join(store, journalFile), journal{Op: opRestore, Target: old.ID, Seq: seq}); err != nil {
		t.Fatal(err)
	}
	h2 := open(t, ws, store)
	if h2.Recovered() == "" {
		t.Error("Recovered() is empty")
	}
	if got := len(h2.List()); got != n {
		t.Errorf("%d checkpoints after recovery, want %d (the restore recorded once)", got, n)
	}
}

// TestFailedRestoreIsFinishedBeforeAnythingElse: a restore that fails partway (here a
// simulated crash, standing for a full disk) leaves a half-restored workspace; the next
// call finishes it first instead of recording the mix.
func TestFailedRestoreIsFinishedBeforeAnythingElse(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	write(t, ws, "a", "1", 0o644)
	write(t, ws, "b", "1", 0o644)
	old := mustCheckpoint(t, h, "1")
	write(t, ws, "a", "2", 0o644)
	write(t, ws, "b", "2", 0o644)
	mustCheckpoint(t, h, "2")
	want := map[string]node{"a": {kind: "f", mode: 0o644, data: "1"}, "b": {kind: "f", mode: 0o644, data: "1"}}
	h.crashAfter = 1
	if _, err := h.Restore(old.ID); !errors.Is(err, errCrash) {
		t.Fatalf("restore: %v, want the simulated failure", err)
	}
	_, created, err := h.Checkpoint(CauseExec, "")
	if err != nil {
		t.Fatal(err)
	}
	if created {
		t.Error("a checkpoint was recorded after finishing the restore, want none (nothing changed)")
	}
	if got := snapshot(t, ws); !mapsEqual(got, want) {
		t.Errorf("workspace %v, want %v", got, want)
	}
	if _, err := os.Stat(filepath.Join(store, journalFile)); err == nil {
		t.Error("journal left behind")
	}
}

// TestRestoreGivesFilesToOwner: an agent running as root restores files the sandbox user
// must still own, whatever kind they are, and keeps a setuid-free mode exactly.
func TestRestoreGivesFilesToOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving files to another user needs root (CI runs as root)")
	}
	ws, store := t.TempDir(), t.TempDir()
	h, err := Open(ws, store, WithOwner(1000, 1001))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	write(t, ws, "dir/f", "1", 0o640)
	if err := os.Symlink("f", filepath.Join(ws, "dir", "l")); err != nil {
		t.Fatal(err)
	}
	c := mustCheckpoint(t, h, "1")
	if err := os.RemoveAll(filepath.Join(ws, "dir")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Restore(c.ID); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"dir", "dir/f", "dir/l"} {
		fi, err := os.Lstat(filepath.Join(ws, rel))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != 1000 || st.Gid != 1001 {
			t.Errorf("%s is owned by %d:%d, want 1000:1001", rel, st.Uid, st.Gid)
		}
	}
	if fi, _ := os.Stat(filepath.Join(ws, "dir/f")); fi.Mode().Perm() != 0o640 {
		t.Errorf("dir/f has mode %v, want 0640", fi.Mode().Perm())
	}
}

// A checkpoint whose trees cannot be stored records nothing, in memory or on disk, and
// the next one records the change, with undo back over it.
func TestCheckpointFailsWhole(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	write(t, ws, "a", "same", 0o644)
	h := open(t, ws, store)
	one := mustCheckpoint(t, h, "one")
	// The new file's content is stored already, so only its trees (d, d/e, the root)
	// need the store's temp directory, which is made a file in their way.
	write(t, ws, "d/e/c", "same", 0o644)
	tmp := filepath.Join(store, tmpDir)
	if err := os.Remove(tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tmp, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.Checkpoint(CauseManual, "two"); err == nil {
		t.Fatal("checkpoint with no temp directory in the store: no error")
	}
	if l := h.List(); len(l) != 1 || l[0].ID != one.ID {
		t.Fatalf("after a failed checkpoint the history lists %+v, want only %s", l, one.ID)
	}
	if err := os.Remove(tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(tmp, storeDirMode); err != nil {
		t.Fatal(err)
	}
	two := mustCheckpoint(t, h, "two")
	if two.Parent != one.ID || two.Changed != 3 { // d, d/e, d/e/c
		t.Errorf("checkpoint after the failure: %+v, want parent %s and 3 changes", two, one.ID)
	}
	h.Close()
	h = open(t, ws, store)
	if l := h.List(); len(l) != 2 || l[0].ID != two.ID {
		t.Fatalf("reopened, the history lists %+v, want %s then %s", l, two.ID, one.ID)
	}
	if _, err := h.Undo(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ws, "d")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after undo, d: %v, want it gone", err)
	}
	if _, err := h.Redo(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "d/e/c")); err != nil || string(b) != "same" {
		t.Errorf("after redo, d/e/c: %q, %v", b, err)
	}
}

// A checkpoint with more new trees than one batch of fsyncs stores them all.
func TestCheckpointManyTrees(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	n := 2*syncBatch + 1
	for i := range n {
		write(t, ws, fmt.Sprintf("d%d/f", i), fmt.Sprint(i), 0o644)
	}
	h := open(t, ws, store)
	mustCheckpoint(t, h, "one")
	if got := countBlobs(t, store); got != 2*n+1 {
		t.Errorf("%d blobs, want %d (%d contents, as many directories' trees, and the root's)", got, 2*n+1, n)
	}
	write(t, ws, "d0/f", "changed", 0o644)
	mustCheckpoint(t, h, "two")
	if _, err := h.Undo(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "d0/f")); string(b) != "0" {
		t.Errorf("after undo, d0/f is %q", b)
	}
}
