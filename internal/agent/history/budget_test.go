package history

import (
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// blobBytes is the size of the store's blobs on disk.
func blobBytes(t *testing.T, store string) int64 {
	t.Helper()
	var n int64
	filepath.WalkDir(filepath.Join(store, objectsDir), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			fi, _ := d.Info()
			n += fi.Size()
		}
		return nil
	})
	return n
}

// noise is n bytes no other call returns, so that each checkpoint stores new content.
func noise(r *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + r.IntN(26))
	}
	return string(b)
}

// checkReachable fails if a blob reached by a checkpoint left in h is missing.
func checkReachable(t *testing.T, h *History) {
	t.Helper()
	for _, c := range h.List() {
		var walk func(sum string)
		walk = func(sum string) {
			es, err := h.tree(sum)
			if err != nil {
				t.Fatalf("checkpoint %s: %v", c.ID, err)
			}
			for _, e := range es {
				switch {
				case e.Kind == kindDir:
					walk(e.Hash)
				case e.Kind == kindFile && !h.blobs.has(e.Hash):
					t.Fatalf("checkpoint %s: blob of %s was collected", c.ID, e.Name)
				}
			}
		}
		walk(c.Tree)
	}
}

// TestBudgetCompactsOldestFirst: a history that outgrows its budget drops its oldest
// checkpoints, says how many on the oldest kept, shrinks under the budget, and every
// checkpoint left still restores exactly; content shared with a checkpoint left is kept.
func TestBudgetCompactsOldestFirst(t *testing.T) {
	const budget = 64 << 10
	ws, store := t.TempDir(), t.TempDir()
	h, err := Open(ws, store, WithBudget(budget))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	r := rand.New(rand.NewPCG(1, 2))
	shared := noise(r, 8<<10) // in every checkpoint: must never be collected
	write(t, ws, "shared/big", shared, 0o644)
	states := map[string]map[string]node{}
	var ids []string
	for i := range 40 {
		write(t, ws, "f"+strconv.Itoa(i%5), noise(r, 4<<10), 0o644)
		write(t, ws, "dir/g", noise(r, 1<<10), 0o600)
		c := mustCheckpoint(t, h, strconv.Itoa(i))
		states[c.ID] = snapshot(t, ws)
		ids = append(ids, c.ID)
		if got := blobBytes(t, store); got > budget+16<<10 {
			t.Fatalf("after checkpoint %d the store holds %d bytes, over the budget of %d by more than one checkpoint", i, got, budget)
		}
	}
	size, b := h.Usage()
	if got := blobBytes(t, store); got > budget || size != got || b != budget {
		t.Errorf("store holds %d bytes (Usage says %d of %d), want at most the budget of %d", got, size, b, budget)
	}
	l := h.List()
	oldest := l[len(l)-1]
	dropped := len(ids) - len(l)
	if dropped == 0 || oldest.Compacted != dropped || oldest.Parent != "" {
		t.Fatalf("oldest kept %+v of %d left: want Compacted %d and no parent", oldest, len(l), dropped)
	}
	for i, c := range l { // the newest are kept, in order
		if want := ids[len(ids)-1-i]; c.ID != want {
			t.Fatalf("kept checkpoint %d is %s, want %s: not the oldest dropped first", i, c.ID, want)
		}
		if i < len(l)-1 && c.Compacted != 0 {
			t.Errorf("checkpoint %s says %d compacted; only the oldest kept should", c.ID, c.Compacted)
		}
	}
	t.Logf("%d of %d checkpoints compacted; the store holds %d bytes of a %d budget", dropped, len(ids), size, budget)
	checkReachable(t, h)
	for _, c := range []Checkpoint{oldest, l[len(l)/2], l[0]} {
		if _, err := h.Restore(c.ID); err != nil {
			t.Fatalf("restore %s after compaction: %v", c.ID, err)
		}
		if got := snapshot(t, ws); !mapsEqual(got, states[c.ID]) {
			t.Errorf("restore %s after compaction: workspace differs", c.ID)
		}
	}
	if _, err := h.Restore(ids[0]); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("restore of a compacted checkpoint: %v, want NotFound", err)
	}

	// What compaction did survives reopening.
	h.Close()
	h2 := open(t, ws, store)
	if l2 := h2.List(); len(l2) < len(l) || l2[len(l2)-1].Compacted < dropped {
		t.Errorf("after reopening: oldest %+v", l2[len(l2)-1])
	}
}

// TestBudgetKeepsPositionAndRedo: with a budget smaller than what undo and redo still
// need, compaction drops everything else but keeps the current position, every checkpoint
// redo reaches and the newest, and redo restores them exactly; undo stops at the oldest
// kept, saying why.
func TestBudgetKeepsPositionAndRedo(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	r := rand.New(rand.NewPCG(3, 4))
	states := map[string]map[string]node{}
	var ids []string
	for i := range 8 {
		write(t, ws, "f", noise(r, 2<<10), 0o644)
		write(t, ws, "d/n"+strconv.Itoa(i), "x", 0o644)
		c := mustCheckpoint(t, h, strconv.Itoa(i))
		states[c.ID] = snapshot(t, ws)
		ids = append(ids, c.ID)
	}
	for range 3 {
		if _, err := h.Undo(); err != nil {
			t.Fatal(err)
		}
	}
	// Far too small for what must be kept: the next compaction keeps only that.
	h.mu.Lock()
	h.budget = 1024
	err := h.enforceBudget()
	h.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	pos, _ := h.Current()
	if pos.ID != ids[4] {
		t.Fatalf("current %s, want %s", pos.ID, ids[4])
	}
	kept := map[string]bool{}
	for _, c := range h.List() {
		kept[c.ID] = true
	}
	for _, id := range []string{ids[4], ids[5], ids[6], ids[7]} {
		if !kept[id] {
			t.Errorf("checkpoint %s, which undo or redo reaches, was compacted (kept %v)", id, kept)
		}
	}
	if kept[ids[0]] || kept[ids[3]] {
		t.Errorf("checkpoints before the position were kept: %v", kept)
	}
	checkReachable(t, h)
	if _, err := h.Undo(); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "compacted") {
		t.Errorf("undo past the oldest kept: %v, want FailedPrecondition saying compacted", err)
	}
	for _, id := range ids[5:] {
		if _, err := h.Redo(); err != nil {
			t.Fatalf("redo to %s: %v", id, err)
		}
		if got := snapshot(t, ws); !mapsEqual(got, states[id]) {
			t.Errorf("redo to %s after compaction: workspace differs", id)
		}
	}
	// Still over budget (what is kept is bigger): no compaction at every checkpoint, but a
	// retry once the store has grown.
	if size, _ := h.Usage(); size <= 1024 || h.retryAt <= size {
		t.Errorf("size %d, retry at %d: want over budget with a later retry", size, h.retryAt)
	}
}

// TestBudgetCollectsGarbage: blobs no checkpoint references (a scan that was not
// recorded) go at the next compaction; the stat cache forgets them, so that a file with
// that content is stored again rather than recorded without its blob.
func TestBudgetCollectsGarbage(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h, err := Open(ws, store, WithBudget(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	write(t, ws, "a", "a", 0o644)
	mustCheckpoint(t, h, "a")
	stray := strings.Repeat("garbage ", 200<<10)
	sum, _, err := h.blobs.put([]byte(stray))
	if err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	h.size += int64(len(stray))
	h.cache["stray"] = statEntry{Hash: sum}
	err = h.enforceBudget()
	h.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if h.blobs.has(sum) {
		t.Error("unreferenced blob kept")
	}
	if _, ok := h.cache["stray"]; ok {
		t.Error("stat cache still names the deleted blob")
	}
	if got := loadStatCache(filepath.Join(store, statFile)); got["stray"].Hash != "" {
		t.Error("stat cache on disk still names the deleted blob")
	}
	if size, _ := h.Usage(); size != blobBytes(t, store) {
		t.Errorf("Usage says %d bytes, the store holds %d", size, blobBytes(t, store))
	}
	if n := len(h.List()); n != 1 {
		t.Errorf("%d checkpoints, want the one", n)
	}
}

// TestBudgetHoldsAtCheckpoint: a checkpoint whose changes would take the store over its
// budget compacts the older checkpoints first, and when even that leaves no room it records
// nothing and says so (ErrLimitExceeded, naming the budget), leaving the store within it;
// once the large file is gone, checkpoints work again. A file far larger than the budget is
// refused without being copied into the store.
func TestBudgetHoldsAtCheckpoint(t *testing.T) {
	const budget = 256 << 10
	ws, store := t.TempDir(), t.TempDir()
	h, err := Open(ws, store, WithBudget(budget))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 6 { // older checkpoints that a compaction may drop
		write(t, ws, "f", noise(r, 40<<10), 0o644)
		mustCheckpoint(t, h, strconv.Itoa(i))
	}
	// Fits only once older checkpoints are dropped: compacted first, then recorded.
	write(t, ws, "mid", noise(r, 150<<10), 0o644)
	mustCheckpoint(t, h, "mid")
	if size := blobBytes(t, store); size > budget {
		t.Fatalf("store holds %d bytes after a checkpoint that fit by compacting, budget %d", size, budget)
	}
	for _, big := range []int{300 << 10, 2 << 20} {
		write(t, ws, "big", noise(r, big), 0o644)
		_, _, err = h.Checkpoint(CauseManual, "big")
		if !errors.Is(err, errdefs.ErrLimitExceeded) || !strings.Contains(err.Error(), "256 KiB") || !strings.Contains(err.Error(), `"big"`) {
			t.Fatalf("checkpoint of %d bytes over a %d budget: %v, want ErrLimitExceeded naming the budget and the file", big, budget, err)
		}
		if size := blobBytes(t, store); size > budget {
			t.Fatalf("store holds %d bytes after a refused checkpoint, budget %d", size, budget)
		}
		if size, _ := h.Usage(); size != blobBytes(t, store) {
			t.Errorf("Usage says %d bytes, the store holds %d", size, blobBytes(t, store))
		}
		// Tried again unchanged (the watcher would): refused without reading it again.
		h.mu.Lock()
		now := h.now
		h.now = func() time.Time { return now().Add(time.Hour) } // no file is racy
		h.mu.Unlock()
		if _, _, err := h.Checkpoint(CauseWatcher, ""); !errors.Is(err, errdefs.ErrLimitExceeded) || h.hashed != 0 {
			t.Errorf("the same checkpoint again: %v, %d files hashed; want refused, none read", err, h.hashed)
		}
		h.mu.Lock()
		h.now = now
		h.mu.Unlock()
	}
	if err := os.Remove(filepath.Join(ws, "big")); err != nil {
		t.Fatal(err)
	}
	write(t, ws, "small", "x", 0o644)
	mustCheckpoint(t, h, "without big")
	checkReachable(t, h)
}

// TestBudgetRetriesOnceKeptChange: a store over its budget because of what it had to keep
// (the newest checkpoint alone was larger) is compacted again at the next checkpoint, once
// that no longer must be kept, even though the store did not grow.
func TestBudgetRetriesOnceKeptChange(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	r := rand.New(rand.NewPCG(7, 8))
	write(t, ws, "big", noise(r, 512<<10), 0o644)
	mustCheckpoint(t, h, "big") // recorded without a budget, as an older store may hold
	h.mu.Lock()
	h.budget = 64 << 10
	err := h.enforceBudget() // cannot get under: the newest checkpoint is kept
	h.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(ws, "big")); err != nil {
		t.Fatal(err)
	}
	mustCheckpoint(t, h, "without big")
	if size := blobBytes(t, store); size > 64<<10 {
		t.Fatalf("store holds %d bytes after the large file's checkpoint could be dropped, budget %d", size, 64<<10)
	}
}
