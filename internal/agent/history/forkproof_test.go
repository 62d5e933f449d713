package history

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// proofSource makes a workspace and its store at a checkpoint whose files' stat is all
// cached (written, aged past the racy window, then checkpointed), and returns them with
// the open history.
func proofSource(t *testing.T) (ws, store string, h *History, c Checkpoint) {
	t.Helper()
	ws, store = t.TempDir(), t.TempDir()
	h = open(t, ws, store)
	write(t, ws, "a.txt", "one", 0o644)
	write(t, ws, "dir/b.txt", "bee", 0o600)
	write(t, ws, "dir/sub/c.sh", "#!/bin/sh\n", 0o755)
	if err := os.Symlink("a.txt", filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(ws, "dir/empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * racyWindow)
	c = mustCheckpoint(t, h, "first")
	return ws, store, h, c
}

// TestProveFrozen: a workspace untouched since its checkpoint is proven to be it; any
// change a restore would undo is not.
func TestProveFrozen(t *testing.T) {
	if ok := prove(t, func(t *testing.T, ws, store string, h *History) {}); !ok {
		t.Fatal("an untouched workspace is not proven to be its checkpoint")
	}
	cases := []struct {
		name   string
		change func(t *testing.T, ws, store string, h *History)
	}{
		{"a file rewritten with its size and mtime", func(t *testing.T, ws, _ string, _ *History) {
			p := filepath.Join(ws, "a.txt")
			fi, _ := os.Stat(p)
			write(t, ws, "a.txt", "two", 0o644)
			if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
				t.Fatal(err)
			}
		}},
		{"a file added, its directory's mtime kept", func(t *testing.T, ws, _ string, _ *History) {
			fi, _ := os.Stat(filepath.Join(ws, "dir"))
			write(t, ws, "dir/zz.txt", "new", 0o644)
			if err := os.Chtimes(filepath.Join(ws, "dir"), fi.ModTime(), fi.ModTime()); err != nil {
				t.Fatal(err)
			}
		}},
		{"a file removed", func(t *testing.T, ws, _ string, _ *History) { rm(t, filepath.Join(ws, "dir/b.txt")) }},
		{"a directory removed", func(t *testing.T, ws, _ string, _ *History) { rmAll(t, filepath.Join(ws, "dir/sub")) }},
		{"a file's mode", func(t *testing.T, ws, _ string, _ *History) { chmod(t, filepath.Join(ws, "a.txt"), 0o600) }},
		{"a directory's mode", func(t *testing.T, ws, _ string, _ *History) { chmod(t, filepath.Join(ws, "dir"), 0o700) }},
		{"a directory's mtime", func(t *testing.T, ws, _ string, _ *History) {
			if err := os.Chtimes(filepath.Join(ws, "dir"), time.Now(), time.Now().Add(-time.Hour)); err != nil {
				t.Fatal(err)
			}
		}},
		{"a symlink's target", func(t *testing.T, ws, _ string, _ *History) {
			rm(t, filepath.Join(ws, "link"))
			if err := os.Symlink("dir/b.txt", filepath.Join(ws, "link")); err != nil {
				t.Fatal(err)
			}
		}},
		{"a file swapped for a symlink", func(t *testing.T, ws, _ string, _ *History) {
			rm(t, filepath.Join(ws, "a.txt"))
			if err := os.Symlink("dir/b.txt", filepath.Join(ws, "a.txt")); err != nil {
				t.Fatal(err)
			}
		}},
		{"a file changed and checkpointed within the racy window", func(t *testing.T, ws, _ string, h *History) {
			write(t, ws, "a.txt", "two", 0o644)
			mustCheckpoint(t, h, "racy")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if prove(t, tc.change) {
				t.Errorf("proven after %s", tc.name)
			}
		})
	}
}

// prove makes a proof source, applies change, and proves its current checkpoint.
func prove(t *testing.T, change func(t *testing.T, ws, store string, h *History)) bool {
	t.Helper()
	ws, store, h, c := proofSource(t)
	change(t, ws, store, h)
	ok, err := ProveFrozen(store, c.ID, ws)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestProveFrozenReads: a file the stat cache does not vouch for (no cache, one that does
// not parse, a file rewritten with the same content) is read and proven by its content,
// within the proof's budget; past it, not proven.
func TestProveFrozenReads(t *testing.T) {
	cases := []struct {
		name   string
		change func(t *testing.T, ws, store string, h *History)
	}{
		{"no stat cache", func(t *testing.T, _, store string, _ *History) { rm(t, filepath.Join(store, statFile)) }},
		{"a stat cache that does not parse", func(t *testing.T, _, store string, _ *History) {
			if err := os.WriteFile(filepath.Join(store, statFile), []byte("junk"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"a file rewritten with the same content", func(t *testing.T, ws, _ string, _ *History) {
			p := filepath.Join(ws, "a.txt")
			fi, _ := os.Stat(p)
			write(t, ws, "a.txt", "one", 0o644)
			if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !prove(t, tc.change) {
				t.Errorf("not proven after %s", tc.name)
			}
		})
	}
	t.Run("past the budget", func(t *testing.T) {
		ws, store := t.TempDir(), t.TempDir()
		h := open(t, ws, store)
		write(t, ws, "a.txt", "one", 0o644)
		if err := os.Truncate(filepath.Join(ws, "a.txt"), hashBudget+1); err != nil {
			t.Fatal(err)
		}
		c := mustCheckpoint(t, h, "big")
		ok, why, err := ProveFrozenWhy(store, c.ID, ws)
		if ok || err != nil || !strings.Contains(why, "budget") {
			t.Errorf("a file past the budget, not cached: %v, %q, %v", ok, why, err)
		}
	})
}

// TestProveFrozenOlderCheckpoint: a workspace at its second checkpoint is not proven to
// be its first; a checkpoint that does not exist is not found.
func TestProveFrozenOlderCheckpoint(t *testing.T) {
	ws, store, h, first := proofSource(t)
	write(t, ws, "a.txt", "two", 0o644)
	time.Sleep(2 * racyWindow)
	mustCheckpoint(t, h, "second")
	if ok, err := ProveFrozen(store, "", ws); !ok || err != nil {
		t.Fatalf("the current checkpoint: %v, %v", ok, err)
	}
	if ok, err := ProveFrozen(store, first.ID, ws); ok || err != nil {
		t.Errorf("the first checkpoint: %v, %v", ok, err)
	}
	if _, err := ProveFrozen(store, "99", ws); err == nil || !strings.Contains(err.Error(), `"99"`) {
		t.Errorf("a missing checkpoint: %v", err)
	}
}

// TestProveFrozenMountPoint: a file system mounted inside the workspace is not in its
// image's copy, so it is not proven.
func TestProveFrozenMountPoint(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	ws, store, _, c := proofSource(t)
	// A tmpfs with the directory's mode and mtime, as empty as it was.
	at := filepath.Join(ws, "dir/empty")
	fi, err := os.Stat(at)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", at, "tmpfs", 0, "mode=0755"); err != nil {
		t.Fatalf("mount: %v", err)
	}
	defer unix.Unmount(at, unix.MNT_DETACH)
	if err := os.Chtimes(at, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if ok, err := ProveFrozen(store, c.ID, ws); ok || err != nil {
		t.Errorf("proven over a mount point: %v, %v", ok, err)
	}
}

// TestProveFrozenFollowsNoLink: a tree blob the sandbox swapped for a link out of its
// store is not read.
func TestProveFrozenFollowsNoLink(t *testing.T) {
	ws, store, h, c := proofSource(t)
	h.Close()
	outside := filepath.Join(t.TempDir(), "tree")
	blob := filepath.Join(store, objectsDir, c.Tree[:2], c.Tree[2:])
	data, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(outside, data, 0o600); err != nil {
		t.Fatal(err)
	}
	rm(t, blob)
	if err := os.Symlink(outside, blob); err != nil {
		t.Fatal(err)
	}
	if ok, err := ProveFrozen(store, c.ID, ws); ok || err == nil {
		t.Errorf("proven through a link out of the store: %v, %v", ok, err)
	}
}

// TestForkOverProvenCopy: over a copy of a proven source, the fork records what a fork
// that walks the copy records (the same timeline and position), its workspace is the
// checkpoint, a scan of it finds no change, undo goes into the source's past, and what the
// fork stores is not in its source's store.
func TestForkOverProvenCopy(t *testing.T) {
	ws, store, h, first := proofSource(t)
	write(t, ws, "a.txt", "two", 0o644)
	write(t, ws, "dir/added.txt", "added", 0o644)
	time.Sleep(2 * racyWindow)
	second := mustCheckpoint(t, h, "second")
	want := snapshot(t, ws)
	if ok, err := ProveFrozen(store, "", ws); !ok || err != nil {
		t.Fatalf("not proven: %v, %v", ok, err)
	}
	copyOf := func() string {
		to := t.TempDir()
		if out, err := exec.Command("cp", "-a", ws+"/.", to).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v: %s", err, out)
		}
		return to
	}
	ws1, ws2 := copyOf(), copyOf()
	dst1, dst2 := filepath.Join(t.TempDir(), "store"), filepath.Join(t.TempDir(), "store")
	walked, err := ForkOverCopy(store, dst1, "", ws1)
	if err != nil {
		t.Fatal(err)
	}
	info, err := ForkOverProvenCopy(store, dst2, "", ws2)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Proven || info.At.ID != second.ID || info.Linked+info.Cloned == 0 || info.Trusted == 0 {
		t.Errorf("fork info %+v", info)
	}
	if got := snapshot(t, ws2); !mapsEqual(got, want) {
		t.Fatalf("the proven fork's workspace:\n got %v\nwant %v", got, want)
	}
	f1, f2 := open(t, ws1, dst1), open(t, ws2, dst2)
	l1, l2 := f1.List(), f2.List()
	if len(l1) != len(l2) {
		t.Fatalf("timelines: walked %+v, proven %+v", l1, l2)
	}
	for i := range l1 {
		a, b := l1[i], l2[i]
		a.Time, b.Time = time.Time{}, time.Time{}
		if a != b {
			t.Errorf("checkpoint %d: walked %+v, proven %+v", i, a, b)
		}
	}
	c1, _ := f1.Current()
	c2, _ := f2.Current()
	if c1.ID != c2.ID || c2.Cause != CauseRestore || c2.Restores != second.ID || c2.Tree != second.Tree {
		t.Errorf("positions: walked %+v, proven %+v (walked %d blobs)", c1, c2, walked.Linked)
	}
	if c, created, err := f2.Checkpoint(CauseManual, "scan"); err != nil || created {
		t.Errorf("a scan of the proven fork found a change: %+v, %v", c, err)
	}

	// The fork's own work is its own: the source's store never sees it.
	write(t, ws2, "fork.txt", "the fork's own work", 0o644)
	mine := mustCheckpoint(t, f2, "mine")
	blobs := blobStore{dir: store}
	for _, e := range mustTree(t, f2, mine.Tree) {
		if e.Name == "fork.txt" && blobs.has(e.Hash) {
			t.Errorf("the source's store holds the fork's new blob")
		}
	}
	if blobs.has(mine.Tree) {
		t.Errorf("the source's store holds the fork's new tree")
	}
	// Undo goes back through the fork's restore into the source's past.
	if _, err := f2.Undo(); err != nil {
		t.Fatal(err)
	}
	if _, err := f2.Restore(first.ID); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, ws2, "a.txt"); got != "one" {
		t.Errorf("the fork's a.txt at the first checkpoint: %q", got)
	}
	if _, err := os.Lstat(filepath.Join(ws2, "dir/added.txt")); err == nil {
		t.Errorf("the fork at the first checkpoint holds dir/added.txt")
	}
	// The source is untouched.
	if got := readFile(t, ws, "a.txt"); got != "two" {
		t.Errorf("the source's a.txt: %q", got)
	}
}

func mustTree(t *testing.T, h *History, sum string) []entry {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	es, err := h.tree(sum)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

func readFile(t *testing.T, dir, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func rm(t *testing.T, p string) {
	t.Helper()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
}

func rmAll(t *testing.T, p string) {
	t.Helper()
	if err := os.RemoveAll(p); err != nil {
		t.Fatal(err)
	}
}

func chmod(t *testing.T, p string, m os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, m); err != nil {
		t.Fatal(err)
	}
}

// TestShareLinksOnlyBlobs: a name the source lists as a blob but that is a symlink, a
// FIFO or a directory by the time it is linked is not left in the fork's store; a blob
// is linked read-only for both stores.
func TestShareLinksOnlyBlobs(t *testing.T) {
	from, into := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(from, "blob"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(from, "link")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(from, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(from, "dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g, err := os.Open(into)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	s := &sharer{}
	for _, name := range []string{"blob", "link", "fifo", "dir", "gone"} {
		if err := s.link(int(f.Fd()), int(g.Fd()), name); err != nil && name != "dir" {
			t.Errorf("link %s: %v", name, err)
		}
	}
	names, err := os.ReadDir(into)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || names[0].Name() != "blob" || s.linked != 1 {
		t.Fatalf("the fork's store holds %v, %d linked: want the blob alone", names, s.linked)
	}
	fi, err := os.Stat(filepath.Join(from, "blob"))
	if err != nil || fi.Mode().Perm() != 0o444 {
		t.Errorf("the shared blob's mode: %v, %v", fi.Mode(), err)
	}
}
