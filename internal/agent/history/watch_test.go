package history

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fullTree is the tree a walk of the whole workspace finds now, by a History of its own
// (no watcher, its own store).
func fullTree(t *testing.T, ref *History) string {
	t.Helper()
	ref.mu.Lock()
	defer ref.mu.Unlock()
	tree, _, err := ref.scan()
	if err != nil {
		t.Fatalf("full walk: %v", err)
	}
	return tree
}

// incremental checkpoints with h (which has a watcher) and returns the tree its scan found,
// failing unless that scan read only what the watcher reported.
func incremental(t *testing.T, h *History) string {
	t.Helper()
	n := h.scans.incremental
	if _, _, err := h.Checkpoint(CauseWatcher, ""); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	if h.scans.incremental != n+1 {
		t.Fatalf("the checkpoint walked the whole workspace (the watcher gave up)")
	}
	return h.lastScan
}

// TestWatcherMatchesFullWalk makes random changes of every kind (edits, creations,
// deletions, renames of files and directories, directories moved out and back in,
// symlinks, modes, mtimes) and after each round wants the checkpoint that read only the
// directories the watcher reported to find exactly the tree a full walk finds.
func TestWatcherMatchesFullWalk(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("WATCH_SEED"); s != "" { // to replay a failure: WATCH_SEED=<the seed logged>
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	ws, outside := t.TempDir(), t.TempDir()
	h, err := Open(ws, t.TempDir(), WithWatcher())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ref := open(t, ws, t.TempDir())
	write(t, ws, "a/b/c/f", "f", 0o644)
	write(t, ws, "a/g", "g", 0o644)
	write(t, ws, "d/h", "h", 0o644)
	if _, _, err := h.Checkpoint(CauseManual, "base"); err != nil {
		t.Fatal(err)
	}
	if !h.Watching() {
		t.Fatal("Watching() is false after the first checkpoint with WithWatcher")
	}
	// A directory outside the workspace that absolute links point at: the mutator must
	// never change it through them (checked at the end).
	canary := t.TempDir()
	write(t, canary, "x", "canary", 0o644)
	before, err := os.Stat(canary)
	if err != nil {
		t.Fatal(err)
	}
	m := &mutator{t: t, rng: rng, ws: ws, outside: outside, canary: canary}
	defer func() {
		after, err := os.Stat(canary)
		if err != nil || after.Mode() != before.Mode() || !after.ModTime().Equal(before.ModTime()) {
			t.Errorf("the mutator changed %s through a link: %v %v, was %v %v", canary, after.Mode(), after.ModTime(), before.Mode(), before.ModTime())
		}
		if b, err := os.ReadFile(filepath.Join(canary, "x")); err != nil || string(b) != "canary" {
			t.Errorf("the mutator changed %s/x through a link: %q %v", canary, b, err)
		}
	}()
	for round := range 300 {
		var did []string
		for range 1 + rng.IntN(3) {
			did = append(did, m.step())
		}
		if got, want := incremental(t, h), fullTree(t, ref); got != want {
			t.Fatalf("round %d, after %s: the watcher's checkpoint found tree %.12s, a full walk %.12s", round, strings.Join(did, ", "), got, want)
		}
	}
	// And what it recorded is restorable, the trees it reused included.
	c, _, err := h.Checkpoint(CauseManual, "end")
	if err != nil {
		t.Fatal(err)
	}
	want := snapshot(t, ws)
	os.RemoveAll(filepath.Join(ws, "a"))
	if _, err := h.Restore(c.ID); err != nil {
		t.Fatal(err)
	}
	if got := snapshot(t, ws); !mapsEqual(got, want) {
		t.Errorf("restore of the watcher's last checkpoint:\n got %v\nwant %v", got, want)
	}
}

// mutator makes one random change to a workspace.
type mutator struct {
	t           *testing.T
	rng         *rand.Rand
	ws, outside string
	canary      string // what absolute links point at
	n           int
	parked      [][2]string // directories moved out of the workspace (where, from), to come back
}

// entries lists the workspace's directories (itself included, as "") and other entries.
func (m *mutator) entries() (dirs, others []string) {
	dirs = []string{""}
	filepath.WalkDir(m.ws, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == m.ws {
			return nil
		}
		rel, _ := filepath.Rel(m.ws, p)
		if d.IsDir() {
			dirs = append(dirs, rel)
		} else {
			others = append(others, rel)
		}
		return nil
	})
	return dirs, others
}

func (m *mutator) pick(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[m.rng.IntN(len(s))]
}

// isLink reports whether rel is a symlink (or gone): what the mutator must not act through.
func (m *mutator) isLink(rel string) bool {
	fi, err := os.Lstat(filepath.Join(m.ws, rel))
	return err != nil || fi.Mode()&fs.ModeSymlink != 0
}

func (m *mutator) step() string {
	m.n++
	dirs, others := m.entries()
	dir, other := m.pick(dirs), m.pick(others)
	fresh := filepath.Join(dir, "n"+strconv.Itoa(m.n))
	abs := func(rel string) string { return filepath.Join(m.ws, rel) }
	switch op := m.rng.IntN(14); {
	case op == 0 || other == "":
		os.WriteFile(abs(fresh), []byte(fmt.Sprint("new ", m.n)), 0o644)
		return "create " + fresh
	case op == 1:
		f, err := os.OpenFile(abs(other), os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0)
		if err == nil {
			fmt.Fprint(f, "more ", m.n)
			f.Close()
		}
		return "append " + other
	case op == 2:
		if !m.isLink(other) { // a link may point out of the workspace: never write through it
			os.WriteFile(abs(other), []byte(fmt.Sprint("rewrite ", m.n)), 0o600)
		}
		return "rewrite " + other
	case op == 3:
		os.Remove(abs(other))
		return "remove " + other
	case op == 4:
		os.MkdirAll(abs(filepath.Join(fresh, "x", "y")), 0o755)
		os.WriteFile(abs(filepath.Join(fresh, "x", "y", "z")), []byte("z"), 0o644)
		return "mkdir " + fresh + "/x/y"
	case op == 5 && dir != "":
		os.RemoveAll(abs(dir))
		return "rm -r " + dir
	case op == 6:
		os.Rename(abs(other), abs(filepath.Join(m.pick(dirs), "r"+strconv.Itoa(m.n))))
		return "mv file " + other
	case op == 7:
		to := m.pick(others) // over another file
		os.Rename(abs(other), abs(to))
		return "mv " + other + " over " + to
	case op == 8 && dir != "":
		to := m.pick(dirs)
		if to == dir || strings.HasPrefix(to, dir+"/") {
			return "no-op"
		}
		os.Rename(abs(dir), abs(filepath.Join(to, "m"+strconv.Itoa(m.n))))
		return "mv dir " + dir + " into " + to
	case op == 9:
		// Absolute targets point at the canary, never at the host's files: an earlier
		// version pointed one at /etc, and a chmod through it changed the host's /etc.
		os.Symlink(m.pick([]string{"../" + other, m.canary, filepath.Join(m.canary, "x"), "missing", other}), abs(fresh))
		return "symlink " + fresh
	case op == 10:
		t := time.Unix(int64(m.rng.IntN(1e9)), 0)
		os.Lchown(abs(other), 0, 0)
		if p := m.pick([]string{other, dir}); !m.isLink(p) { // os.Chtimes follows links
			os.Chtimes(abs(p), t, t)
		}
		return "touch"
	case op == 11:
		if p := m.pick([]string{other, dir}); !m.isLink(p) { // os.Chmod follows links
			os.Chmod(abs(p), fs.FileMode(0o700|m.rng.IntN(0o100)))
		}
		return "chmod"
	case op == 12 && dir != "":
		park := filepath.Join(m.outside, strconv.Itoa(m.n))
		if os.Rename(abs(dir), park) == nil {
			m.parked = append(m.parked, [2]string{park, dir})
		}
		return "mv " + dir + " out"
	case op == 13 && len(m.parked) > 0:
		park := m.parked[len(m.parked)-1]
		m.parked = m.parked[:len(m.parked)-1]
		// Changed while outside: the watcher must not trust what it knew of it, even
		// back under its old name (same inode, same path).
		// O_NOFOLLOW: a link renamed over "while-out" may point at the canary.
		if f, err := os.OpenFile(filepath.Join(park[0], "while-out"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o644); err == nil {
			fmt.Fprint(f, m.n)
			f.Close()
		}
		// Back under its old name only where that name's parent is still the workspace's
		// own directory, not a link out of it.
		to := park[1]
		if real, err := filepath.EvalSymlinks(filepath.Dir(abs(to))); err != nil || (real != m.ws && !strings.HasPrefix(real, m.ws+"/")) {
			to = fresh
		}
		if os.Rename(park[0], abs(to)) != nil {
			to = fresh
			os.Rename(park[0], abs(to))
		}
		return "mv back in as " + to
	}
	os.WriteFile(abs(fresh), nil, 0o644)
	return "create empty " + fresh
}

// TestWatcherOverflowWalks: past the kernel's event queue the watcher cannot vouch for
// anything, and the next checkpoint walks the whole workspace, and is right.
func TestWatcherOverflowWalks(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events")
	if err != nil {
		t.Skipf("cannot read the inotify queue's size: %v", err)
	}
	max, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if max <= 0 || max > 100000 {
		t.Skipf("max_queued_events is %d: too many files to make to overflow it", max)
	}
	ws := t.TempDir()
	h, err := Open(ws, t.TempDir(), WithWatcher())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ref := open(t, ws, t.TempDir())
	write(t, ws, "d/f", "f", 0o644)
	if _, _, err := h.Checkpoint(CauseManual, "base"); err != nil {
		t.Fatal(err)
	}
	for i := range max + 10 {
		if err := os.WriteFile(filepath.Join(ws, "d", "n"+strconv.Itoa(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	full := h.scans.full
	if _, _, err := h.Checkpoint(CauseWatcher, ""); err != nil {
		t.Fatal(err)
	}
	if h.scans.full != full+1 {
		t.Error("after the queue overflowed, the checkpoint did not walk the whole workspace")
	}
	if want := fullTree(t, ref); h.lastScan != want {
		t.Errorf("checkpoint after overflow found tree %.12s, a full walk %.12s", h.lastScan, want)
	}
	// Healthy again after that walk.
	write(t, ws, "d/f", "g", 0o644)
	if got, want := incremental(t, h), fullTree(t, ref); got != want {
		t.Errorf("after recovering from overflow: tree %.12s, a full walk %.12s", got, want)
	}
}

// TestWithoutWatcherWalks: without WithWatcher nothing changes: every checkpoint walks.
func TestWithoutWatcherWalks(t *testing.T) {
	ws := t.TempDir()
	h := open(t, ws, t.TempDir())
	write(t, ws, "f", "f", 0o644)
	mustCheckpoint(t, h, "1")
	if h.Watching() {
		t.Error("Watching() without WithWatcher")
	}
	write(t, ws, "f", "g", 0o644)
	mustCheckpoint(t, h, "2")
	if h.scans.incremental != 0 {
		t.Errorf("%d incremental scans without a watcher", h.scans.incremental)
	}
}

// TestWaitChange: WaitChange wakes at a change no checkpoint has recorded, waits while
// there is none, wakes a waiter when the History closes, and says so without a watcher.
func TestWaitChange(t *testing.T) {
	ws := t.TempDir()
	h, err := Open(ws, t.TempDir(), WithWatcher())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.Checkpoint(CauseManual, "start"); err != nil {
		t.Fatal(err)
	}
	quiet := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if err := h.WaitChange(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitChange on a quiet workspace: %v, want the deadline", err)
		}
	}
	quiet()
	n := h.Activity()
	write(t, ws, "a", "1", 0o644)
	if err := h.WaitChange(context.Background()); err != nil {
		t.Fatalf("WaitChange after a write: %v", err)
	}
	if m := h.Activity(); m <= n {
		t.Fatalf("Activity %d after a write, was %d: want it to grow", m, n)
	}
	// Read by Activity, not yet checkpointed: still a change to wait for.
	if err := h.WaitChange(context.Background()); err != nil {
		t.Fatalf("WaitChange after Activity read the change: %v", err)
	}
	if _, created, err := h.Checkpoint(CauseWatcher, ""); err != nil || !created {
		t.Fatalf("checkpoint: %v %v", created, err)
	}
	quiet()

	done := make(chan error)
	go func() { done <- h.WaitChange(context.Background()) }()
	time.Sleep(50 * time.Millisecond)
	h.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("WaitChange reported a change when the History closed")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitChange still waits after Close")
	}

	plain := open(t, t.TempDir(), t.TempDir())
	if err := plain.WaitChange(context.Background()); !errors.Is(err, ErrNoWatcher) {
		t.Fatalf("WaitChange without a watcher: %v, want ErrNoWatcher", err)
	}
}
