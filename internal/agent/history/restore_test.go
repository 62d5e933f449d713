package history

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
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

// TestRestoreWritesFilesConcurrently: a restore writes several files at once, so that one
// file's copy or wait on the disk does not hold up the others; a directory still gets its
// mode and mtime only once its files are in.
func TestRestoreWritesFilesConcurrently(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	for i := range 20 {
		write(t, ws, fmt.Sprintf("d/f%d", i), fmt.Sprintf("file %d", i), 0o644)
	}
	write(t, ws, "d/sub/g", "g", 0o600)
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(ws, "d"), old, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(ws, "d"), 0o550); err != nil {
		t.Fatal(err)
	}
	c := mustCheckpoint(t, h, "base")
	want := snapshot(t, ws)
	if err := os.Chmod(filepath.Join(ws, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(ws, "d")); err != nil {
		t.Fatal(err)
	}
	// The first file waits for a second one to start: written one at a time, the second
	// would only start once the first gave up waiting.
	second, overlapped := make(chan struct{}), false
	var started atomic.Int32
	h.writing = func() {
		switch started.Add(1) {
		case 1:
			select {
			case <-second:
				overlapped = true
			case <-time.After(time.Minute):
			}
		case 2:
			close(second)
		}
	}
	if _, err := h.Restore(c.ID); err != nil {
		t.Fatal(err)
	}
	if !overlapped {
		t.Error("the restore wrote its files one at a time")
	}
	if got := snapshot(t, ws); !mapsEqual(got, want) {
		t.Fatalf("after restore:\n got %v\nwant %v", got, want)
	}
	fi, err := os.Stat(filepath.Join(ws, "d"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o550 || !fi.ModTime().Equal(old) {
		t.Errorf("d has mode %v and mtime %v, want 0550 and %v", fi.Mode().Perm(), fi.ModTime(), old)
	}
}

// TestRestoreWritesAcrossDirectories: the restore goes on to the next directory while the
// files of the last one are still being written, so that the workers are not idle while
// it opens each directory; every directory still gets its mode and mtime once its files
// are in.
func TestRestoreWritesAcrossDirectories(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	write(t, ws, "a/f", "a", 0o644)
	write(t, ws, "b/f", "b", 0o644)
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, d := range []string{"a", "b"} {
		if err := os.Chtimes(filepath.Join(ws, d), old, old); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(ws, "a"), 0o550); err != nil {
		t.Fatal(err)
	}
	c := mustCheckpoint(t, h, "base")
	want := snapshot(t, ws)
	if err := os.Chmod(filepath.Join(ws, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"a", "b"} {
		if err := os.RemoveAll(filepath.Join(ws, d)); err != nil {
			t.Fatal(err)
		}
	}
	// a/f waits for b/f to start: a restore that waited for a's files before going on to
	// b would start b/f only once a/f gave up waiting.
	second, overlapped := make(chan struct{}), false
	var started atomic.Int32
	h.writing = func() {
		switch started.Add(1) {
		case 1:
			select {
			case <-second:
				overlapped = true
			case <-time.After(30 * time.Second):
			}
		case 2:
			close(second)
		}
	}
	if _, err := h.Restore(c.ID); err != nil {
		t.Fatal(err)
	}
	if !overlapped {
		t.Error("the restore waited for one directory's files before writing the next directory's")
	}
	if got := snapshot(t, ws); !mapsEqual(got, want) {
		t.Fatalf("after restore:\n got %v\nwant %v", got, want)
	}
	for _, d := range []string{"a", "b"} {
		fi, err := os.Stat(filepath.Join(ws, d))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.ModTime().Equal(old) {
			t.Errorf("%s has mtime %v, want %v", d, fi.ModTime(), old)
		}
	}
}

// TestRestoreOfManyDirectories restores more directories than a restore holds open at
// once: each still gets its files, mode and mtime, read-only ones included.
func TestRestoreOfManyDirectories(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	n := maxOpenDirs + 50
	mtime := func(i int) time.Time { return time.Date(2020, 1, 1, 0, 0, i, 0, time.UTC) }
	for i := range n {
		write(t, ws, fmt.Sprintf("top%d/d%d/f", i%3, i), fmt.Sprint(i), 0o644)
	}
	for i := range n {
		d := filepath.Join(ws, fmt.Sprintf("top%d/d%d", i%3, i))
		if err := os.Chtimes(d, mtime(i), mtime(i)); err != nil {
			t.Fatal(err)
		}
		if i%7 == 0 {
			if err := os.Chmod(d, 0o555); err != nil {
				t.Fatal(err)
			}
		}
	}
	c := mustCheckpoint(t, h, "base")
	want := snapshot(t, ws)
	for i := range n {
		if err := os.Chmod(filepath.Join(ws, fmt.Sprintf("top%d/d%d", i%3, i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if err := os.RemoveAll(filepath.Join(ws, fmt.Sprintf("top%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.Restore(c.ID); err != nil {
		t.Fatal(err)
	}
	if got := snapshot(t, ws); !mapsEqual(got, want) {
		t.Fatalf("after restore:\n got %v\nwant %v", got, want)
	}
	for i := range n {
		fi, err := os.Stat(filepath.Join(ws, fmt.Sprintf("top%d/d%d", i%3, i)))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.ModTime().Equal(mtime(i)) {
			t.Errorf("d%d has mtime %v, want %v", i, fi.ModTime(), mtime(i))
		}
	}
	if _, _, err := h.Reconcile(""); err != nil {
		t.Fatal(err)
	}
	if cur, _ := h.Current(); cur.Tree != c.Tree {
		t.Error("the restored workspace scans as another tree than the checkpoint's")
	}
}
