package history

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// TestFork: a fork's workspace is exactly the checkpoint's, in files of its own; its store
// shares the source's blobs (reflinked or hard-linked, never copied) and holds the source's
// timeline; the source, which stays open, is untouched.
func TestFork(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	write(t, ws, "a.txt", "one", 0o644)
	write(t, ws, "bin/run.sh", "#!/bin/sh\n", 0o755)
	if err := os.Symlink("a.txt", filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	first := mustCheckpoint(t, h, "first")
	want := snapshot(t, ws)
	write(t, ws, "a.txt", "two", 0o644)
	mustCheckpoint(t, h, "second")

	dst, ws2 := filepath.Join(t.TempDir(), "store"), t.TempDir()
	info, err := Fork(store, dst, first.ID, ws2)
	if err != nil {
		t.Fatal(err)
	}
	if got := snapshot(t, ws2); !mapsEqual(got, want) {
		t.Fatalf("the fork's workspace:\n got %v\nwant %v", got, want)
	}
	if info.At.ID != first.ID || info.OpenTx != nil || info.Linked+info.Cloned == 0 {
		t.Errorf("fork info %+v", info)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(ws2, "a.txt"), &st); err != nil || st.Nlink != 1 {
		t.Errorf("the fork's file is linked elsewhere (%d links, %v)", st.Nlink, err)
	}
	write(t, ws2, "a.txt", "fork's own", 0o644)
	if b, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(b) != "two" {
		t.Errorf("the source's file changed with the fork's: %q", b)
	}
	h2 := open(t, ws2, dst)
	list := h2.List()
	if len(list) != 3 || list[0].Cause != CauseRestore || list[0].Tree != first.Tree {
		t.Errorf("the fork's timeline: %+v", list)
	}
	// The source still reads its history, its shared blobs included.
	if _, err := h.Restore(first.ID); err != nil {
		t.Fatalf("the source's restore after the fork: %v", err)
	}
}

// TestForkMissingCheckpoint: a checkpoint that does not exist is not found, by name, and
// nothing is made.
func TestForkMissingCheckpoint(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	write(t, ws, "a.txt", "one", 0o644)
	mustCheckpoint(t, h, "first")
	dst := filepath.Join(t.TempDir(), "store")
	_, err := Fork(store, dst, "cp-nope", t.TempDir())
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "cp-nope") {
		t.Fatalf("fork of a missing checkpoint: %v", err)
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Errorf("a failed fork left a store: %v", err)
	}
}

// TestForkOpenTransaction: with a transaction open, a fork starts from the state before it
// and says which transaction it left out.
func TestForkOpenTransaction(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	write(t, ws, "a.txt", "before", 0o644)
	base := mustCheckpoint(t, h, "base")
	tx, err := h.Begin("half done")
	if err != nil {
		t.Fatal(err)
	}
	write(t, ws, "a.txt", "inside the transaction", 0o644)
	ws2 := t.TempDir()
	info, err := Fork(store, filepath.Join(t.TempDir(), "store"), "", ws2)
	if err != nil {
		t.Fatal(err)
	}
	if info.At.ID != base.ID || info.OpenTx == nil || info.OpenTx.ID != tx.ID {
		t.Errorf("fork during a transaction: %+v", info)
	}
	if b, _ := os.ReadFile(filepath.Join(ws2, "a.txt")); string(b) != "before" {
		t.Errorf("the fork holds %q, want the state before the transaction", b)
	}
}

// FuzzReadCheckpoint: whatever a store's index holds (its agent wrote it), reading a
// checkpoint from it on the host never panics, and a found checkpoint is the one asked for.
func FuzzReadCheckpoint(f *testing.F) {
	f.Add([]byte(`{"checkpoints":[{"id":"1","tree":"t"}],"pos":"1","seq":1}`), "1")
	f.Add([]byte(`{"checkpoints":[],"pos":"","tx":{"id":"tx1","base":"9"}}`), "")
	f.Add([]byte(`not json`), "x")
	f.Fuzz(func(t *testing.T, index []byte, at string) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, indexFile), index, 0o600); err != nil {
			t.Fatal(err)
		}
		c, _, err := ReadCheckpoint(dir, at)
		if err == nil && at != "" && c.ID != at {
			t.Errorf("asked for %q, got %q", at, c.ID)
		}
	})
}

// TestForkFollowsNoLinkOutOfTheStore: the host forks a store the sandbox's agent wrote. A
// symlink planted among the blobs, to a directory or a file outside the store, is neither
// followed, made read-only nor linked into the fork.
func TestForkFollowsNoLinkOutOfTheStore(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	write(t, ws, "a.txt", "one", 0o644)
	first := mustCheckpoint(t, h, "first")
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("host's"), 0o600); err != nil {
		t.Fatal(err)
	}
	objs := filepath.Join(store, objectsDir)
	if err := os.Symlink(outside, filepath.Join(objs, "zz")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(objs, "zzfile")); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "store")
	if _, err := Fork(store, dst, first.ID, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(secret); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the host's file outside the store was changed: %v, %v", fi.Mode(), err)
	}
	for _, name := range []string{"zz", "zz/secret", "zzfile"} {
		if _, err := os.Lstat(filepath.Join(dst, objectsDir, name)); err == nil {
			t.Errorf("the fork holds %s, planted outside the store", name)
		}
	}
}

// TestForkOverCopy: over a copy of the source's workspace that has since changed (a file
// rewritten, one added, one removed), the fork is exactly the checkpoint; the source's stat
// cache is carried over on the copy's device. A stat cache the sandbox swapped for a link
// out of its store is not followed.
func TestForkOverCopy(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	write(t, ws, "a.txt", "one", 0o644)
	write(t, ws, "keep/b.txt", "kept", 0o600)
	time.Sleep(2 * racyWindow) // let the files' stat be cached
	first := mustCheckpoint(t, h, "first")
	want := snapshot(t, ws)

	ws2 := t.TempDir()
	if out, err := exec.Command("cp", "-a", ws+"/.", ws2).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	write(t, ws2, "a.txt", "changed in the copy", 0o644)
	write(t, ws2, "extra.txt", "not in the checkpoint", 0o644)
	if err := os.Remove(filepath.Join(ws2, "keep/b.txt")); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "store")
	info, err := ForkOverCopy(store, dst, first.ID, ws2)
	if err != nil {
		t.Fatal(err)
	}
	if got := snapshot(t, ws2); !mapsEqual(got, want) {
		t.Fatalf("the fork over the copy:\n got %v\nwant %v", got, want)
	}
	if info.Trusted == 0 {
		t.Errorf("no stat cache entry carried over: %+v", info)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(ws2, &st); err != nil {
		t.Fatal(err)
	}
	carried := t.TempDir()
	if _, err := carryStatCache(store, carried, ws2); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(carried, statFile))
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeStatCache(b)
	if err != nil || len(m) == 0 {
		t.Fatalf("the fork's stat cache: %d entries, %v", len(m), err)
	}
	for p, e := range m {
		if e.Key.Dev != st.Dev {
			t.Errorf("the fork's cache entry %s is on device %d, not the copy's %d", p, e.Key.Dev, st.Dev)
		}
	}

	// A link planted as the stat cache: not followed.
	outside := filepath.Join(t.TempDir(), "cache")
	if err := os.WriteFile(outside, encodeStatCache(m), 0o600); err != nil {
		t.Fatal(err)
	}
	h.Close()
	if err := os.Remove(filepath.Join(store, statFile)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(store, statFile)); err != nil {
		t.Fatal(err)
	}
	ws3 := t.TempDir()
	info, err = ForkOverCopy(store, filepath.Join(t.TempDir(), "store"), first.ID, ws3)
	if err != nil {
		t.Fatal(err)
	}
	if info.Trusted != 0 {
		t.Errorf("the fork read a stat cache through a link out of the store: %d entries", info.Trusted)
	}
	if got := snapshot(t, ws3); !mapsEqual(got, want) {
		t.Errorf("the fork without a cache:\n got %v\nwant %v", got, want)
	}
}

// FuzzDecodeStatCache: the host decodes a stat cache the sandbox's agent wrote (a fork over
// a copy of its disk): any bytes fail or decode, never panic, and what decodes encodes to
// bytes that decode to the same.
func FuzzDecodeStatCache(f *testing.F) {
	f.Add([]byte(statMagic))
	f.Add(encodeStatCache(map[string]statEntry{"a.txt": {Key: statKey{Size: 3, Ino: 7, Dev: 9, Mode: 0o644}, Hash: strings.Repeat("ab", 32)}}))
	f.Add([]byte("junk"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeStatCache(b)
		if err != nil {
			return
		}
		again, err := decodeStatCache(encodeStatCache(m))
		if err != nil || len(again) != len(m) {
			t.Fatalf("re-decoded %d entries of %d: %v", len(again), len(m), err)
		}
		for p, e := range m {
			if again[p] != e {
				t.Fatalf("%q: %+v became %+v", p, e, again[p])
			}
		}
	})
}
