package history

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Size budget. The store's blobs (file contents and trees, nearly all of its bytes) are kept
// within a budget by compaction: when a change takes them over it, the oldest checkpoints
// are dropped from the timeline, oldest first, until what is left fits in lowWater of the
// budget, and every blob no remaining checkpoint reaches is deleted. Never dropped: the
// current position, every checkpoint redo can reach, the newest checkpoint (the workspace as
// last scanned) and an open transaction's base; those alone may hold more than the budget,
// and then the store stays over it until they change. The oldest checkpoint kept says how
// many were dropped before it (Checkpoint.Compacted), and undo stops there.
//
// A checkpoint never takes the store over its budget: its scan stops as soon as its new
// content would (a large file is hashed first and not copied at all), older checkpoints
// are compacted to make room and the workspace scanned again, and changes that still do
// not fit are not recorded (ErrLimitExceeded, naming the file and the budget).
//
// Crash safety: the index without the dropped checkpoints is written (atomically) before
// any blob is deleted, so a crash leaves, at worst, unreferenced blobs, which the next
// compaction collects.

// lowWater is the fraction of the budget a compaction aims for, so that it does not run
// again at the very next checkpoint.
const lowWater = 0.75

// WithBudget keeps the store's blobs within about bytes (see above); 0, the default,
// keeps everything.
func WithBudget(bytes int64) Option {
	return func(h *History) { h.budget = bytes }
}

// Usage returns the bytes the store's blobs take and the budget (0: none).
func (h *History) Usage() (size, budget int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.size, h.budget
}

// measure sets h.size from the blobs on disk.
func (h *History) measure() error {
	var total int64
	err := h.walkBlobs(func(_ string, size int64) error {
		total += size
		return nil
	})
	h.size = total
	return err
}

// walkBlobs calls f with every blob's hash and size.
func (h *History) walkBlobs(f func(sum string, size int64) error) error {
	root := filepath.Join(h.dir, objectsDir)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		sum := filepath.Dir(rel) + filepath.Base(rel)
		if !validSum(sum) {
			return nil // not a blob of ours; leave it alone
		}
		return f(sum, fi.Size())
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return storeErr("walk blobs", err)
	}
	return nil
}

// enforceBudget compacts the history when its blobs are over budget. After a compaction
// that could not get under it (what must be kept is too big), it waits for the store to
// grow by an eighth of the budget before trying again, rather than walk every tree at every
// checkpoint.
func (h *History) enforceBudget() error {
	if h.budget <= 0 || h.size <= h.budget || (h.size < h.retryAt && h.keepKey() == h.retryKeep) {
		return nil
	}
	if err := h.compact(int64(float64(h.budget) * lowWater)); err != nil {
		return fmt.Errorf("the history is over its size budget (%d bytes) and compacting it failed: %w", h.budget, err)
	}
	h.retryAt = 0
	if h.size > h.budget {
		h.retryAt, h.retryKeep = h.size+h.budget/8, h.keepKey()
	}
	return nil
}

// keepKey names the set of checkpoints compaction keeps: once it changes (a newer
// checkpoint, an undo), what it kept before may be dropped, however little the store grew.
func (h *History) keepKey() string {
	return strings.Join(slices.Sorted(maps.Keys(h.protected())), ",")
}

// errOverBudget stops a scan whose new content would take the store over its budget.
var errOverBudget = errors.New("over the history's size budget")

// compactAndScan is a checkpoint's second try after its scan stopped at the budget (first):
// older checkpoints are compacted to make room, as usual first and then all that may be,
// and the workspace is scanned again after each. A store held over its budget by what it
// must keep (the current checkpoint larger than the budget, recorded before it was set or
// lowered) then takes a checkpoint whose files fit in the budget as a whole: once it is
// recorded, the next compaction may drop the rest. If the changes still do not fit, nothing
// is recorded, what the scans stored is collected, and the error says so: the store never
// keeps more than its budget for a checkpoint's sake.
func (h *History) compactAndScan(first error) (string, *scanner, error) {
	err := first
	for _, target := range []int64{int64(float64(h.budget) * lowWater), 0} {
		if cerr := h.compact(target); cerr != nil {
			return "", nil, fmt.Errorf("the history is at its size budget and compacting it failed: %w", cerr)
		}
		h.retryAt = 0
		var tree string
		var sc *scanner
		tree, sc, err = h.scan()
		if !errors.Is(err, errOverBudget) {
			return tree, sc, err
		}
		if h.size <= h.budget {
			continue
		}
		tree, sc, err = h.scanWhole()
		if !errors.Is(err, errOverBudget) {
			return tree, sc, err
		}
	}
	// What this fails to collect, the next compaction does (blobs no checkpoint reaches).
	_ = h.compact(0)
	return "", nil, fmt.Errorf("checkpoint not recorded: the workspace's changes (%s) do not fit in the history's size budget of %s, even with every older checkpoint compacted; remove large files from the workspace, or keep them outside it: %w",
		unwrapOverBudget(err), formatBytes(h.budget), errdefs.ErrLimitExceeded)
}

// unwrapOverBudget is the path and size an errOverBudget names, without the sentinel.
func unwrapOverBudget(err error) string {
	return strings.TrimSuffix(err.Error(), ": "+errOverBudget.Error())
}

// formatBytes prints n in the largest binary unit that divides it, else in bytes.
func formatBytes(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n > 0 && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s", n>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// neverFreed ranks the blobs of checkpoints compaction keeps whatever happens.
const neverFreed = int(^uint(0) >> 1)

// compact drops the oldest checkpoints compaction may drop until the blobs left take at
// most target bytes (or none is left to drop), and deletes the blobs no checkpoint reaches.
func (h *History) compact(target int64) error {
	keep := h.protected()
	var candidates []int // indexes into idx.Checkpoints, oldest first
	for i, c := range h.idx.Checkpoints {
		if !keep[c.ID] {
			candidates = append(candidates, i)
		}
	}
	// rank: for each blob, the position in candidates of the last candidate that reaches
	// it (neverFreed for blobs of kept checkpoints); dropping candidates[:k] frees exactly
	// the blobs of rank < k. Walking from the newest candidate down, the first walk to
	// reach a blob gives its rank, and a tree already walked needs no second walk.
	rank, walked := map[string]int{}, map[string]bool{}
	if tx := h.idx.Tx; tx != nil {
		if err := h.rankTree(rank, walked, tx.Tree, neverFreed); err != nil {
			return err
		}
	}
	for _, c := range h.idx.Checkpoints {
		if keep[c.ID] {
			if err := h.rankTree(rank, walked, c.Tree, neverFreed); err != nil {
				return err
			}
		}
	}
	for k := len(candidates) - 1; k >= 0; k-- {
		if err := h.rankTree(rank, walked, h.idx.Checkpoints[candidates[k]].Tree, k); err != nil {
			return err
		}
	}
	type blob struct {
		sum  string
		size int64
		rank int
	}
	var blobs []blob
	var total int64
	err := h.walkBlobs(func(sum string, size int64) error {
		r, ok := rank[sum]
		if !ok {
			r = -1 // reached by no checkpoint: garbage of a scan that was not recorded
		}
		blobs = append(blobs, blob{sum, size, r})
		total += size
		return nil
	})
	if err != nil {
		return err
	}
	// freedBy[k]: bytes freed by dropping candidates[:k].
	freedBy := make([]int64, len(candidates)+1)
	for _, b := range blobs {
		if b.rank < len(candidates) {
			freedBy[b.rank+1] += b.size
		}
	}
	for k := 1; k < len(freedBy); k++ {
		freedBy[k] += freedBy[k-1]
	}
	drop := len(candidates)
	for k, freed := range freedBy {
		if total-freed <= target {
			drop = k
			break
		}
	}
	if err := h.dropOldest(candidates[:drop]); err != nil {
		return err
	}
	gone := map[string]bool{}
	for _, b := range blobs {
		if b.rank < drop {
			gone[b.sum] = true
		}
	}
	// A stat-cache entry naming a deleted blob would let the next scan record a file
	// without storing its content again: such entries go, durably, before the blobs do.
	dropped := false
	for p, e := range h.cache {
		if gone[e.Hash] {
			delete(h.cache, p)
			dropped = true
		}
	}
	if dropped {
		if err := replaceFile(filepath.Join(h.dir, statFile), encodeStatCache(h.cache), true); err != nil {
			return err
		}
	}
	clear(h.trees)
	// The trees the last scan kept for unchanged directories may be among the blobs
	// collected below: the next scan walks everything.
	h.dirs = nil
	h.size = total
	for _, b := range blobs {
		if !gone[b.sum] {
			continue
		}
		if err := os.Remove(h.blobs.path(b.sum)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return storeErr("delete blob", err)
		}
		h.size -= b.size
	}
	return nil
}

// protected is the set of checkpoints compaction never drops.
func (h *History) protected() map[string]bool {
	keep := map[string]bool{h.idx.Pos: true}
	for _, id := range h.idx.Redo {
		keep[id] = true
	}
	if n := len(h.idx.Checkpoints); n > 0 {
		keep[h.idx.Checkpoints[n-1].ID] = true
	}
	if h.idx.Tx != nil {
		keep[h.idx.Tx.Base] = true
	}
	return keep
}

// rankTree gives rank r to tree sum and to every blob under it not ranked yet. walked
// holds the trees already walked: a blob may be both a file and a tree (a file can hold
// exactly a tree's bytes), so having a rank does not mean its entries were walked.
func (h *History) rankTree(rank map[string]int, walked map[string]bool, sum string, r int) error {
	if sum == "" {
		return nil
	}
	if _, done := rank[sum]; !done {
		rank[sum] = r
	}
	if walked[sum] {
		return nil
	}
	walked[sum] = true
	es, err := h.tree(sum)
	if err != nil {
		return err
	}
	for _, e := range es {
		switch e.Kind {
		case kindDir:
			if err := h.rankTree(rank, walked, e.Hash, r); err != nil {
				return err
			}
		case kindFile:
			if _, done := rank[e.Hash]; !done {
				rank[e.Hash] = r
			}
		}
	}
	return nil
}

// dropOldest removes the checkpoints at indexes drop (ascending) from the timeline and
// saves the index. A checkpoint whose parent is dropped becomes the first of the history.
func (h *History) dropOldest(drop []int) error {
	if len(drop) == 0 {
		return nil
	}
	saved := h.idx
	saved.Checkpoints = slices.Clone(h.idx.Checkpoints)
	dropped := map[string]bool{}
	for _, i := range drop {
		dropped[h.idx.Checkpoints[i].ID] = true
	}
	kept := make([]Checkpoint, 0, len(h.idx.Checkpoints)-len(drop))
	for _, c := range h.idx.Checkpoints {
		if dropped[c.ID] {
			continue
		}
		if dropped[c.Parent] {
			c.Parent = ""
		}
		c.Compacted = 0
		kept = append(kept, c)
	}
	h.idx.Compacted += len(drop)
	kept[0].Compacted = h.idx.Compacted
	h.idx.Checkpoints = kept
	h.reindex()
	if err := h.saveIndex(); err != nil {
		h.idx = saved
		h.reindex()
		return err
	}
	return nil
}
