package history

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRestoreSyncsOnceAndTrustsWhatItWrote: a restore of a whole workspace makes it
// durable with one syncfs (not an fsync per file), and the scan that records it reads back
// none of the files it wrote: their stat came from the restore itself.
func TestRestoreSyncsOnceAndTrustsWhatItWrote(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	for i := range 40 {
		write(t, ws, fmt.Sprintf("d%d/f%d", i%4, i), fmt.Sprintf("file %d", i), 0o644)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), (smallFile+4096)/16)
	if err := os.WriteFile(filepath.Join(ws, "big.bin"), big, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Symlink("d0/f0", filepath.Join(ws, "link"))
	c := mustCheckpoint(t, h, "base")
	want := snapshot(t, ws)
	for _, n := range []string{"d0", "d1", "d2", "d3", "big.bin", "link"} {
		if err := os.RemoveAll(filepath.Join(ws, n)); err != nil {
			t.Fatal(err)
		}
	}
	syncs := h.syncs
	r, err := h.Restore(c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := snapshot(t, ws); !mapsEqual(got, want) {
		t.Fatalf("after restore:\n got %v\nwant %v", got, want)
	}
	if r.Tree != c.Tree {
		t.Errorf("the restore recorded tree %s, want %s", r.Tree, c.Tree)
	}
	if n := h.syncs - syncs; n != 1 {
		t.Errorf("the restore synced %d file systems, want 1", n)
	}
	if h.hashed != 0 {
		t.Errorf("the scan after the restore hashed %d files again, want 0", h.hashed)
	}
}

// TestLargeTouchedFileIsNotCopied: a large file whose stat changed but whose content is
// already stored is hashed in place, never streamed into the store's tmp/ (which is made
// unusable here, so that a copy fails the checkpoint).
func TestLargeTouchedFileIsNotCopied(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	big := bytes.Repeat([]byte("abcdefghijklmnop"), (3*smallFile)/16)
	p := filepath.Join(ws, "big.bin")
	if err := os.WriteFile(p, big, 0o644); err != nil {
		t.Fatal(err)
	}
	mustCheckpoint(t, h, "base")
	time.Sleep(2 * racyWindow)
	if _, _, err := h.Checkpoint(CauseWatcher, ""); err != nil { // the stat cache takes it
		t.Fatal(err)
	}
	tmp := filepath.Join(store, tmpDir)
	if err := os.RemoveAll(tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tmp, nil, 0o600); err != nil { // root ignores modes, not ENOTDIR
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(p, later, later); err != nil {
		t.Fatal(err)
	}
	_, created, err := h.Checkpoint(CauseWatcher, "")
	if err != nil {
		t.Fatalf("checkpoint of a touched large file: %v", err)
	}
	if created {
		t.Error("a change of mtime alone made a checkpoint")
	}
	if h.hashed != 1 {
		t.Errorf("hashed %d files, want the touched one", h.hashed)
	}
}
