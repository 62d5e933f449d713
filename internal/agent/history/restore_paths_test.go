package history

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// TestRestoreOverChangedWorkspace: a restore over a workspace with changed, added and
// removed files, changed modes, a retargeted symlink, a directory turned into a file and a
// file hard-linked from outside makes it exactly the checkpoint's: a changed file with one
// link is rewritten in place (same inode, its longer content cut back, its mtime the
// checkpoint's), a file with another link outside is replaced, never written through, and
// no temporary file is left.
func TestRestoreOverChangedWorkspace(t *testing.T) {
	ws, store, outside := t.TempDir(), t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	write(t, ws, "a", "short", 0o644)
	write(t, ws, "dir/run.sh", "#!/bin/sh\n", 0o755)
	write(t, ws, "dir/gone-later", "kept by the checkpoint", 0o644)
	write(t, ws, "ro", "read only", 0o444)
	write(t, ws, "sub/deep/x", "x", 0o600)
	write(t, ws, "linked", "before the link", 0o644)
	if err := os.Symlink("a", filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 1, 2, 3, 4, 5, 6, time.UTC)
	if err := os.Chtimes(filepath.Join(ws, "a"), old, old); err != nil {
		t.Fatal(err)
	}
	c := mustCheckpoint(t, h, "base")
	want := snapshot(t, ws)

	write(t, ws, "a", "a much longer content than before", 0o644)
	write(t, ws, "dir/run.sh", "echo changed\n", 0o600)
	write(t, ws, "ro", "written anyway", 0o644)
	os.Remove(filepath.Join(ws, "dir/gone-later"))
	write(t, ws, "dir/added", "new", 0o644)
	os.Remove(filepath.Join(ws, "link"))
	if err := os.Symlink("dir/added", filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(ws, "sub"))
	write(t, ws, "sub", "now a file", 0o644)
	write(t, ws, "linked", "changed, then linked from outside", 0o644)
	if err := os.Link(filepath.Join(ws, "linked"), filepath.Join(outside, "linked")); err != nil {
		t.Fatal(err)
	}
	mustCheckpoint(t, h, "changed")
	aIno := inode(t, filepath.Join(ws, "a"))

	if _, err := h.Restore(c.ID); err != nil {
		t.Fatal(err)
	}
	got := snapshot(t, ws)
	if !mapsEqual(got, want) {
		t.Fatalf("after restore:\n got %v\nwant %v", got, want)
	}
	if ino := inode(t, filepath.Join(ws, "a")); ino != aIno {
		t.Errorf("a was replaced (inode %d, was %d), want it rewritten in place", ino, aIno)
	}
	fi, err := os.Stat(filepath.Join(ws, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if !fi.ModTime().Equal(old) {
		t.Errorf("a's mtime is %v, want the checkpoint's %v", fi.ModTime(), old)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "linked")); string(b) != "changed, then linked from outside" {
		t.Errorf("the restore wrote through a hard link to a file outside the workspace: it now holds %q", b)
	}
	for p := range got {
		if strings.Contains(p, tempPrefix) {
			t.Errorf("temporary file %s left behind", p)
		}
	}
	if _, created, err := h.Checkpoint(CauseManual, ""); err != nil || created {
		t.Errorf("checkpoint after the restore: created %v, %v; want nothing to record", created, err)
	}
}

// TestRestoreCreatesWhereTheSandboxRaced: a file the restore means to create at its free
// name is still restored when something is put at that name after the restore looked:
// it is replaced, as any file in the way.
func TestRestoreCreatesWhereTheSandboxRaced(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	write(t, ws, "f", "the checkpoint's", 0o640)
	c := mustCheckpoint(t, h, "base")
	want := snapshot(t, ws)
	os.Remove(filepath.Join(ws, "f"))
	h.writing = func() { _ = os.WriteFile(filepath.Join(ws, "f"), []byte("the sandbox's"), 0o666) }
	if _, err := h.Restore(c.ID); err != nil {
		t.Fatal(err)
	}
	h.writing = nil
	if got := snapshot(t, ws); !mapsEqual(got, want) {
		t.Fatalf("after restore:\n got %v\nwant %v", got, want)
	}
}

// TestRestoreDetectsCorruptBlobOnEveryPath: a blob changed on disk (one byte, same size)
// is detected whichever way the restore writes the file (created at a free name, rewritten
// in place), and the restore is taken back: the workspace is as it was before it.
func TestRestoreDetectsCorruptBlobOnEveryPath(t *testing.T) {
	for name, prepare := range map[string]func(t *testing.T, ws string){
		"created":  func(t *testing.T, ws string) { os.Remove(filepath.Join(ws, "f")) },
		"in place": func(t *testing.T, ws string) { write(t, ws, "f", "edited after", 0o644) },
		"replaced": func(t *testing.T, ws string) {
			os.Remove(filepath.Join(ws, "f"))
			write(t, ws, "f/x", "a dir now", 0o644)
		},
		"hard link": func(t *testing.T, ws string) {
			write(t, ws, "f", "edited after", 0o644)
			os.Link(filepath.Join(ws, "f"), filepath.Join(ws, "g"))
		},
	} {
		t.Run(name, func(t *testing.T) {
			ws, store := t.TempDir(), t.TempDir()
			h := open(t, ws, store)
			content := "the checkpoint's content"
			write(t, ws, "f", content, 0o644)
			c := mustCheckpoint(t, h, "base")
			prepare(t, ws)
			mustCheckpoint(t, h, "changed")
			before := snapshot(t, ws)
			sum := sumHex([]byte(content))
			if err := os.WriteFile(h.blobs.path(sum), []byte("The checkpoint's content"), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := h.Restore(c.ID)
			if !errors.Is(err, errdefs.ErrDataLoss) || !strings.Contains(err.Error(), sum[:12]) {
				t.Fatalf("restore from a corrupt blob: %v, want ErrDataLoss naming blob %s", err, sum[:12])
			}
			if got := snapshot(t, ws); !mapsEqual(got, before) {
				t.Errorf("a restore refused for a corrupt blob changed the workspace:\n got %v\nwant %v", got, before)
			}
		})
	}
}

// Undo records every change first, from a walk of the whole workspace, not only what the
// inotify watcher saw: a write through mmap raises no inotify event, and an undo that
// trusted the watcher would overwrite it with nothing to redo.
func TestUndoRecordsWhatTheWatcherMissed(t *testing.T) {
	ws := t.TempDir()
	h, err := Open(ws, t.TempDir(), WithWatcher())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	write(t, ws, "d/a", "1", 0o644)
	write(t, ws, "e/b", "1", 0o644)
	mustCheckpoint(t, h, "base")
	// A program maps e/b for writing (its open and close are events the next checkpoint
	// consumes) and later writes "2" through the mapping, which it keeps: the mtime moves,
	// the watcher hears nothing.
	f, err := os.OpenFile(filepath.Join(ws, "e/b"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, 1, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	write(t, ws, "d/a", "2", 0o644)
	mustCheckpoint(t, h, "edit")
	if !h.Watching() {
		t.Fatal("the watcher is not running")
	}
	time.Sleep(10 * time.Millisecond) // a coarse mtime must still move
	// The mapping stays: its unmapping would be a close, an event.
	m[0] = '2'
	defer unix.Munmap(m)
	if _, err := h.Undo(); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range h.List() {
		found = found || c.Message == "changes found before undo"
	}
	if !found {
		t.Fatal("the write through mmap was not recorded before the undo")
	}
	// The undo took back that write, the newest change.
	if got := snapshot(t, ws); got["e/b"].data != "1" || got["d/a"].data != "2" {
		t.Errorf("after undo e/b = %q, d/a = %q; want 1 and 2", got["e/b"].data, got["d/a"].data)
	}
	if _, err := h.Redo(); err != nil {
		t.Fatal(err)
	}
	if got := snapshot(t, ws)["e/b"].data; got != "2" {
		t.Errorf("e/b = %q after redo, want the write recorded before the undo", got)
	}
}
