package history

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// A corrupt blob costs exactly the checkpoints that use it: restoring one of those fails
// naming the blob, and everything else (other checkpoints, undo, the list) still works.
func TestCorruptBlobLeavesTheRestUsable(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	write(t, ws, "a", "content", 0o644)
	bad := mustCheckpoint(t, h, "a=content")
	write(t, ws, "a", "other", 0o644)
	good := mustCheckpoint(t, h, "a=other")
	write(t, ws, "a", "third", 0o644)
	write(t, ws, "b", "b", 0o644)
	mustCheckpoint(t, h, "a=third")

	sum := sumHex([]byte("content"))
	if err := os.WriteFile(h.blobs.path(sum), []byte("tampered"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, ws)
	_, err := h.Restore(bad.ID)
	if !errors.Is(err, errdefs.ErrDataLoss) || !strings.Contains(err.Error(), sum[:12]) || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("restore from a corrupt blob: %v, want ErrDataLoss naming blob %s", err, sum[:12])
	}
	if !strings.Contains(err.Error(), "refused, the workspace is as it was") {
		t.Errorf("error %q does not say the workspace was put back", err)
	}
	if got := snapshot(t, ws); !mapsEqual(got, before) {
		t.Errorf("a restore refused for a corrupt blob changed the workspace: %v, was %v", got, before)
	}
	if _, err := os.Stat(filepath.Join(store, journalFile)); err == nil {
		t.Error("journal left behind after the restore was taken back")
	}
	if _, created, err := h.Checkpoint(CauseExec, ""); err != nil || created {
		t.Errorf("checkpoint after the refused restore: created %v, %v; want nothing to record", created, err)
	}
	if n := len(h.List()); n != 3 {
		t.Errorf("list after the failed restore: %d checkpoints, want 3", n)
	}
	if _, err := h.Restore(good.ID); err != nil {
		t.Fatalf("restore of a checkpoint without the corrupt blob: %v", err)
	}
	if got := snapshot(t, ws)["a"].data; got != "other" {
		t.Fatalf("a = %q after restoring %s, want other", got, good.ID)
	}
	if _, err := h.Undo(); err != nil {
		t.Fatalf("undo: %v", err)
	}
	if got := snapshot(t, ws)["a"].data; got != "third" {
		t.Fatalf("a = %q after undo, want third", got)
	}
	write(t, ws, "c", "new", 0o644)
	mustCheckpoint(t, h, "after")
}

// A truncated or garbled index is reported by Open as data loss naming the index, and the
// store's other files (the blobs) are left as they were, for whoever repairs it.
func TestCorruptIndexIsReported(t *testing.T) {
	for name, mangle := range map[string]func([]byte) []byte{
		"truncated": func(b []byte) []byte { return b[:len(b)/2] },
		"empty":     func([]byte) []byte { return nil },
		"garbled":   func(b []byte) []byte { return append([]byte("}{"), b...) },
	} {
		t.Run(name, func(t *testing.T) {
			ws, store := t.TempDir(), t.TempDir()
			h, err := Open(ws, store)
			if err != nil {
				t.Fatal(err)
			}
			write(t, ws, "a", "1", 0o644)
			mustCheckpoint(t, h, "1")
			h.Close()
			p := filepath.Join(store, indexFile)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, mangle(b), 0o600); err != nil {
				t.Fatal(err)
			}
			blobs := countBlobs(t, store)
			_, err = Open(ws, store)
			if !errors.Is(err, errdefs.ErrDataLoss) || !strings.Contains(err.Error(), indexFile) {
				t.Fatalf("open with a %s index: %v, want ErrDataLoss naming %s", name, err, indexFile)
			}
			if n := countBlobs(t, store); n != blobs {
				t.Errorf("open of a corrupt store changed its blobs: %d, was %d", n, blobs)
			}
		})
	}
}

// A crash at any step of a restore that meets a corrupt blob, or of putting the workspace
// back afterwards: Open ends with the workspace wholly as it was before the restore, says
// so, and the history is usable.
func TestCrashWhileTakingBackRestore(t *testing.T) {
	for n := 1; ; n++ {
		ws, store := t.TempDir(), t.TempDir()
		h, err := Open(ws, store)
		if err != nil {
			t.Fatal(err)
		}
		write(t, ws, "a", "content", 0o644)
		bad := mustCheckpoint(t, h, "bad")
		write(t, ws, "a", "other", 0o644)
		write(t, ws, "dir/b", "b", 0o644)
		write(t, ws, "c", "c", 0o644)
		mustCheckpoint(t, h, "current")
		want := snapshot(t, ws)
		if err := os.WriteFile(h.blobs.path(sumHex([]byte("content"))), []byte("tampered"), 0o600); err != nil {
			t.Fatal(err)
		}
		h.crashAfter = n
		_, err = h.Restore(bad.ID)
		h.Close()
		if !errors.Is(err, errCrash) {
			if !errors.Is(err, errdefs.ErrDataLoss) {
				t.Fatalf("restore with crash point %d: %v, want ErrDataLoss", n, err)
			}
			if n < 3 {
				t.Fatalf("the restore and its undoing took only %d steps; the test tests nothing", n)
			}
			t.Logf("crashed at each of %d steps of the refused restore and its undoing, and recovered", n-1)
			return
		}
		h2, err := Open(ws, store)
		if err != nil {
			t.Fatalf("reopen after a crash at step %d: %v", n, err)
		}
		if r := h2.Recovered(); !strings.Contains(r, "workspace back") {
			t.Errorf("crash at step %d: Recovered() = %q, want it to say the workspace was put back", n, r)
		}
		if got := snapshot(t, ws); !mapsEqual(got, want) {
			t.Errorf("crash at step %d, after recovery:\n got %v\nwant %v", n, got, want)
		}
		if _, created, err := h2.Checkpoint(CauseExec, ""); err != nil || created {
			t.Errorf("crash at step %d: checkpoint after recovery: created %v, %v; want nothing to record", n, created, err)
		}
		h2.Close()
	}
}
