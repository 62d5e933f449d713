// Package history keeps the workspace's past: checkpoints of the whole workspace stored as
// content-addressed blobs plus an index, with restore, undo and redo that rewrite the
// workspace in place and survive a crash halfway.
//
// A checkpoint is a tree of manifests (one blob per directory: name → kind, mode, size,
// mtime, content hash | symlink target | subtree) plus metadata (id, parent, time, cause,
// message, number of paths changed). Identical content is stored once; an unchanged
// subtree is the same blob, so a checkpoint costs what changed. A scan re-hashes only the
// files whose (size, mtime, ctime, inode, mode) changed since the last scan.
//
// Timeline. Every checkpoint's Parent is the checkpoint the workspace was at when it was
// taken. Undo restores the parent of the current position; Redo goes forward again, until a
// new change forks the timeline. Every restore is itself recorded as a checkpoint of cause
// "restore", so the timeline shows it, but it does not move undo's position: undo twice goes
// back two changes. Restore, Undo and Redo first checkpoint any change not yet recorded
// (cause "watcher"), so they never lose work; such a change forks the timeline, and Redo then
// says which checkpoint did. A change of mtime alone is not a change: it makes no checkpoint.
//
// Threat model. The workspace is written by code in the sandbox, which is not trusted and may
// plant symlinks (absolute, relative, pointing out of the workspace), FIFOs and devices, and
// may race every step we take. The history store is out of its reach (the caller keeps it
// where the sandbox's processes cannot write), so an agent cannot rewrite its own past. So:
//
//   - Every workspace operation goes through an [os.Root] per directory, and each directory
//     opened is checked (device, inode) to be the one just stat'ed: a symlink, wherever it points, is never
//     followed, neither while scanning nor while restoring. Symlinks are recorded and
//     restored as links with their target as stored.
//   - Files are opened O_NONBLOCK through their directory's os.Root (so only something
//     inside that directory can be reached) and recorded from the fstat of what was
//     opened, only if it is regular: a FIFO, socket or device is never recorded or read. A
//     file swapped for a link between stat and open records, at worst, the content of
//     another file of the same directory under its name.
//   - Each file is hashed while it is copied into the store, so a blob's bytes are exactly
//     what its hash names even if the file changes as we read it. Blobs are verified against
//     their hash on every read; a corrupt blob fails with ErrDataLoss. A restore that meets
//     one puts the workspace back as it started (journaled too) rather than leave it for
//     a roll forward that could never finish, so the rest of the history stays usable.
//   - Restore creates a file at a free name directly, rewrites in place a regular file
//     that has no other link (checked on the opened file: nothing outside the workspace is
//     ever written through a hard link), and writes anything else as a temp file in its own
//     directory renamed over the name. A reader in the sandbox may see a file partly
//     written while the restore runs, as with git; a journal in the store, written before
//     the first change, lets Open finish a restore interrupted by a crash (roll forward).
//   - The stat cache trusts ctime, which code in the sandbox cannot set, and does not trust
//     files changed within racyWindow of a scan.
//   - The watcher (WithWatcher) adds each watch through /proc/self/fd of the directory just
//     opened and checked, never by path, and only ever narrows what a scan reads: anything
//     it cannot account for (an overflowed queue, a directory at two paths, a directory
//     moved out and back) makes the scan read that subtree, or everything, again. Code in
//     the sandbox that floods it only makes checkpoints walk.
//
// Costs. A checkpoint walks the whole workspace (one fstatat per entry, no reads of
// unchanged files) and stores the changed files plus one tree blob per directory on the
// path to them; a directory with very many entries makes every change under it store its
// whole (large) tree again. With WithWatcher, Checkpoint reads again only the directories
// an inotify watcher saw change and those above them, keeping every other directory's tree
// from the last scan, so that it costs what changed. Reconcile, and the checkpoints taken
// before a restore, an undo, a redo or a transaction, still walk everything (see watcher
// for what inotify misses). A restore skips subtrees the
// pre-restore scan found already in the target state, writes files several at a time (one
// per CPU), going on to the next directory while the last one's files are written (a
// directory's mode and times are set, in batches, once its files are in), each from its blob
// with its hash checked as it is copied, mode and times set through the open file, without
// an fsync each, and makes them durable with one syncfs of the
// workspace's file system before it is recorded (see restoreTree for why a crash still
// ends wholly old or wholly new), and puts the stat of every file it wrote into the stat
// cache, so that the scan that records it reads none of them back. A large file whose
// stat changed but whose size did not is hashed before it is copied, and not copied if
// its blob exists.
//
// Transactions (Begin, Commit, Rollback; see Transaction) group a multi-step change into
// one checkpoint or none; commit and rollback are journaled like a restore. A size budget
// (WithBudget) drops the oldest checkpoints and collects the blobs no checkpoint left
// reaches (budget.go). Export and Import move a whole history to another host as one
// self-checking stream (export.go); the importer trusts nothing in it.
//
// Not done yet: owners (uid/gid; restore gives what it creates to one owner, see
// WithOwner), xattrs and symlinks' mtimes, which are not recorded, and the mode of the
// workspace directory itself. Compaction drops whole checkpoints; it does not merge them.
// Import takes only an empty history. A store whose index is corrupt fails to open (ErrDataLoss)
// rather than serving what is still readable. A sandbox racing a scan (swapping a directory
// for a link mid-walk) makes that checkpoint fail rather than record a guess. The watcher's
// queue is read only by Checkpoint and Activity (a burst of over 16,384 events between two
// reads overflows the kernel's queue and costs a full walk); it cannot see writes through
// mmap or a hard link from elsewhere until the next full walk (so a restore overwrites
// such a write made since the last Reconcile without recording it first); and the stat cache file is
// still rewritten whole when an incremental scan changes it. Debouncing is the caller's
// (WaitChange and Activity give it what it needs; the agent's watchLoop does it).
package history

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Causes of a checkpoint.
const (
	CauseAgentWrite = "agent-write"
	CauseExec       = "exec"
	CauseManual     = "manual"
	CauseRestore    = "restore"
	CauseWatcher    = "watcher"
	// CauseTransaction is the checkpoint a transaction's Commit makes of all its work.
	CauseTransaction = "transaction"
)

// Checkpoint is one committed state of the workspace.
type Checkpoint struct {
	ID      string    `json:"id"`
	Parent  string    `json:"parent,omitempty"` // the checkpoint the workspace was at before
	Time    time.Time `json:"time"`
	Cause   string    `json:"cause"`
	Message string    `json:"message,omitempty"`
	// Changed is how many paths differ from Parent (see Diff for which).
	Changed int `json:"changed"`
	// Restores is, for a restore checkpoint, the checkpoint whose state was restored.
	Restores string `json:"restores,omitempty"`
	// Transaction is, for cause transaction, the transaction whose work this is.
	Transaction string `json:"transaction,omitempty"`
	// Compacted is, on the oldest checkpoint kept, how many older ones the size budget
	// dropped (see WithBudget): undo stops here.
	Compacted int    `json:"compacted,omitempty"`
	Tree      string `json:"tree"`
}

// DiffResult lists workspace paths (slash-separated, relative) that differ between two
// checkpoints. A path whose mtime alone changed is not a change.
type DiffResult struct {
	Added, Changed, Removed []string
}

// index is the store's metadata, rewritten atomically on every change.
type index struct {
	Checkpoints []Checkpoint `json:"checkpoints"` // oldest first
	Pos         string       `json:"pos"`         // where undo starts from
	Redo        []string     `json:"redo"`        // top is last
	// ForkedBy is the checkpoint that last discarded a redo stack, for Redo's message.
	ForkedBy string `json:"forked_by,omitempty"`
	Seq      int    `json:"seq"`
	// Tx is the open transaction, if any; TxSeq numbers transactions.
	Tx    *Transaction `json:"tx,omitempty"`
	TxSeq int          `json:"tx_seq,omitempty"`
	// Compacted counts the checkpoints the size budget has dropped, ever.
	Compacted int `json:"compacted,omitempty"`
}

// History is one workspace's history. Its methods are safe for concurrent use; only one
// History may have a store open at a time (Open takes a lock on it).
type History struct {
	mu       sync.Mutex
	ws       *os.Root
	dir      string
	blobs    blobStore
	idx      index
	byID     map[string]int
	cache    map[string]statEntry
	trees    map[string][]entry
	pending  map[string][]byte // trees of the last scan, maybe not stored yet
	lastScan string            // the tree the last scan found
	// syncer holds the file systems the running restore wrote to; syncs counts the
	// syncfs calls restores made (tests).
	syncer fsSyncer
	syncs  int
	// writes writes the running restore's files (see filePool), written waits for them,
	// and openDirs holds the directories they are in; writing, when set, is called as each
	// file's write starts (tests).
	writes   *filePool
	written  *writeGroup
	openDirs *openDirs
	writing  func()
	// hashed is how many files the last scan read and hashed (tests).
	hashed int
	// watch, with WithWatcher, reports which directories changed (nil without it, or when
	// inotify could not be had: every scan then walks everything). dirs is every
	// directory's state as the last scan left it, nil when the next scan must walk
	// everything. scans counts full and incremental scans (tests).
	watch     *watcher
	wantWatch bool
	dirs      map[string]dirState
	scans     struct{ full, incremental int }
	// crashAfter, when positive, makes the restore fail after that many workspace changes
	// (tests of crash recovery).
	crashAfter int
	stepMu     sync.Mutex // guards crashAfter: a restore's files are written concurrently
	// unfinished is a restore that failed partway in this process (its journal is still in
	// the store); it is finished before any other change.
	unfinished *journal
	lock       *os.File
	recovered  string
	now        func() time.Time
	// owner, when set, is the uid and gid restore gives what it creates (see SetOwner).
	owner *owner
	// budget bounds size, the bytes of the store's blobs (see WithBudget); retryAt is the
	// size past which a compaction that could not get under budget is tried again, as long
	// as the checkpoints it must keep are still retryKeep.
	budget, size, retryAt int64
	retryKeep             string
	// tooLarge remembers the files that did not fit (scanner.tooLarge).
	tooLarge map[string]statKey
}

type owner struct{ uid, gid int }

// Option changes how Open sets a History up.
type Option func(*History)

// WithOwner makes restore give every file, directory and symlink it creates to uid and gid,
// the restore that Open may finish after a crash included. An agent that runs as root while
// the workspace belongs to the sandbox user needs it: a restored file must stay the user's
// to edit, as it was before. Owners are not recorded in checkpoints; without WithOwner what
// restore creates belongs to the calling process.
func WithOwner(uid, gid int) Option {
	return func(h *History) { h.owner = &owner{uid, gid} }
}

// WithWatcher makes Checkpoint read again only the directories an inotify watcher saw
// change since the last scan (and those above them), instead of walking the whole
// workspace: a checkpoint then costs what changed. It falls back to a full walk whenever
// the watcher may have missed something (its queue overflowed, a watch could not be
// added). inotify does not see every change (see watcher), so a caller should still call
// Reconcile, which always walks everything, now and then. Without inotify, every
// checkpoint walks the workspace, as without this option.
func WithWatcher() Option {
	return func(h *History) { h.wantWatch = true }
}

// Watching says whether the next Checkpoint will read only what the watcher saw change.
func (h *History) Watching() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.watch != nil && h.watch.healthy && h.dirs != nil
}

// Open opens the history of workspace kept in dir, creating the store if needed, and
// finishes a restore a crash interrupted (see Recovered). dir must be outside the workspace
// and out of reach of the sandbox's processes; the caller guarantees that.
func Open(workspace, dir string, opts ...Option) (*History, error) {
	ws, err := os.OpenRoot(workspace)
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", kindOf(err))
	}
	h := &History{ws: ws, dir: dir, blobs: blobStore{dir: dir}, now: time.Now,
		trees: map[string][]entry{}}
	for _, o := range opts {
		o(h)
	}
	if h.wantWatch {
		// Without inotify (no instance left, a kernel without it), checkpoints walk.
		h.watch, _ = newWatcher()
	}
	if err := h.open(); err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

func (h *History) open() error {
	for _, d := range []string{h.dir, filepath.Join(h.dir, objectsDir), filepath.Join(h.dir, tmpDir)} {
		if err := os.MkdirAll(d, storeDirMode); err != nil {
			return storeErr("create", err)
		}
	}
	lock, err := os.OpenFile(filepath.Join(h.dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return storeErr("open lock", err)
	}
	h.lock = lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fmt.Errorf("history store is in use by another process: %w", errdefs.ErrFailedPrecondition)
	}
	// Blobs half-written when a previous process died: never referenced, so garbage.
	if err := os.RemoveAll(filepath.Join(h.dir, tmpDir)); err != nil {
		return storeErr("clear tmp", err)
	}
	if err := os.Mkdir(filepath.Join(h.dir, tmpDir), storeDirMode); err != nil {
		return storeErr("create tmp", err)
	}
	if _, err := readJSON(filepath.Join(h.dir, indexFile), &h.idx); err != nil {
		return err
	}
	h.reindex()
	h.cache = loadStatCache(filepath.Join(h.dir, statFile))
	if err := h.measure(); err != nil {
		return err
	}
	return h.recover()
}

// Close releases the store and the workspace.
func (h *History) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lock != nil {
		h.lock.Close()
		h.lock = nil
	}
	h.watch.close()
	return h.ws.Close()
}

// Recovered says what Open did to finish an interrupted restore, commit or rollback, or to
// roll back a transaction left open, and which state that left the workspace in ("" when
// there was nothing to do).
func (h *History) Recovered() string { return h.recovered }

func (h *History) reindex() {
	h.byID = make(map[string]int, len(h.idx.Checkpoints))
	for i, c := range h.idx.Checkpoints {
		h.byID[c.ID] = i
	}
}

// List returns the timeline, newest first.
func (h *History) List() []Checkpoint {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Checkpoint, len(h.idx.Checkpoints))
	for i, c := range h.idx.Checkpoints {
		out[len(out)-1-i] = c
	}
	return out
}

// Current returns the checkpoint the workspace is at for undo (false before the first).
func (h *History) Current() (Checkpoint, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.get(h.idx.Pos)
}

func (h *History) get(id string) (Checkpoint, bool) {
	i, ok := h.byID[id]
	if !ok {
		return Checkpoint{}, false
	}
	return h.idx.Checkpoints[i], true
}

func (h *History) lookup(id string) (Checkpoint, error) {
	c, ok := h.get(id)
	if !ok {
		return Checkpoint{}, fmt.Errorf("checkpoint %q: %w", id, errdefs.ErrNotFound)
	}
	return c, nil
}

// Checkpoint records the workspace as it is now. When nothing changed since the current
// position it records nothing and returns the current checkpoint with created false.
//
// While a transaction is open, the automatic causes (agent-write, exec, watcher) record
// nothing either: the transaction's work becomes one checkpoint at Commit, or nothing at
// Rollback, and a checkpoint in between would split it. A manual checkpoint is refused
// then (ErrFailedPrecondition): the caller asked for a record it cannot have.
func (h *History) Checkpoint(cause, message string) (Checkpoint, bool, error) {
	switch cause {
	case CauseAgentWrite, CauseExec, CauseManual, CauseWatcher:
	default:
		return Checkpoint{}, false, fmt.Errorf("checkpoint cause %q: want agent-write, exec, manual or watcher: %w", cause, errdefs.ErrInvalidArgument)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.finishPending(); err != nil {
		return Checkpoint{}, false, err
	}
	if h.idx.Tx != nil {
		if cause == CauseManual {
			return Checkpoint{}, false, h.txOpenErr("checkpoint")
		}
		cur, _ := h.get(h.idx.Pos)
		return cur, false, nil
	}
	c, created, err := h.checkpoint(cause, message, true)
	if err == nil && created {
		err = h.enforceBudget()
	}
	return c, created, err
}

// Reconcile is Checkpoint(CauseWatcher, message) after a walk of the whole workspace,
// whatever the watcher reports: it picks up the changes inotify does not see (writes
// through mmap or through a hard link from elsewhere; see WithWatcher).
func (h *History) Reconcile(message string) (Checkpoint, bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.finishPending(); err != nil {
		return Checkpoint{}, false, err
	}
	if h.idx.Tx != nil {
		cur, _ := h.get(h.idx.Pos)
		return cur, false, nil
	}
	c, created, err := h.checkpoint(CauseWatcher, message, false)
	if err == nil && created {
		err = h.enforceBudget()
	}
	return c, created, err
}

// checkpoint records the workspace if it changed. incremental lets the scan read only
// what the watcher saw change; the checkpoints taken before a restore or a transaction
// walk everything, since what they miss would be overwritten unrecorded.
func (h *History) checkpoint(cause, message string, incremental bool) (Checkpoint, bool, error) {
	scan := h.scan
	if incremental {
		scan = h.scanChanged
	}
	tree, sc, err := scan()
	if errors.Is(err, errOverBudget) {
		tree, sc, err = h.compactAndScan(err)
	}
	if err != nil {
		return Checkpoint{}, false, err
	}
	clear(h.tooLarge) // every file fit
	cur, hasCur := h.get(h.idx.Pos)
	if hasCur {
		// The tree differs when only an mtime changed; that is not worth a checkpoint.
		d, err := h.diffTrees(cur.Tree, tree)
		if err != nil {
			return Checkpoint{}, false, err
		}
		if d.empty() {
			return cur, false, h.saveCache(sc)
		}
	}
	// The scan's trees are stored with the index, their fsyncs in one batch; if that
	// fails, the index in memory goes back to what is on disk.
	prev := h.idx
	c, err := h.appendCheckpoint(tree, sc, cause, message, "")
	if err != nil {
		return Checkpoint{}, false, err
	}
	if len(h.idx.Redo) > 0 {
		h.idx.Redo, h.idx.ForkedBy = nil, c.ID
	}
	h.idx.Pos = c.ID
	if err := h.saveIndexWith(h.pending); err != nil {
		delete(h.byID, c.ID)
		h.idx = prev
		return Checkpoint{}, false, err
	}
	h.pending = nil // stored
	return c, true, nil
}

// scan walks the workspace and returns its tree's hash, with the scanner holding the new
// trees and stat cache. With a watcher, it (re)watches every directory as it reads it.
func (h *History) scan() (string, *scanner, error) {
	return h.scanWith(&scanner{room: h.budget - h.size, budgeted: h.budget > 0})
}

// scanWhole is scan bounding the workspace's files as a whole by the budget rather than
// the new bytes by the room left (see compactAndScan).
func (h *History) scanWhole() (string, *scanner, error) {
	return h.scanWith(&scanner{room: h.budget, whole: true})
}

func (h *History) scanWith(sc *scanner) (string, *scanner, error) {
	if h.tooLarge == nil {
		h.tooLarge = map[string]statKey{}
	}
	sc.tooLarge = h.tooLarge
	sc.blobs, sc.oldCache, sc.newCache = h.blobs, h.cache, map[string]statEntry{}
	sc.trees, sc.cutoff = map[string][]byte{}, h.now().Add(-racyWindow).UnixNano()
	var old map[int32]string
	if h.watch != nil {
		old = h.watch.restart()
		sc.watch, sc.dirs = h.watch, map[string]dirState{}
	}
	h.scans.full++
	tree, err := sc.scanDir(h.ws, ".", true)
	h.pending, h.lastScan, h.hashed, h.dirs = sc.trees, tree, sc.hashed, nil
	h.size += sc.newBytes
	if h.watch != nil {
		h.watch.finish(old)
		if err == nil {
			h.dirs = sc.dirs
		}
	}
	return tree, sc, err
}

// scanChanged is scan, reading only the directories the watcher saw change and those
// above them when it can vouch for every other one (see watcher); else it walks.
func (h *History) scanChanged() (string, *scanner, error) {
	if h.watch == nil || h.dirs == nil {
		return h.scan()
	}
	dirty, ok := h.watch.take()
	if !ok {
		return h.scan()
	}
	h.scans.incremental++
	if h.tooLarge == nil {
		h.tooLarge = map[string]statKey{}
	}
	sc := &scanner{blobs: h.blobs, oldCache: h.cache, newCache: h.cache, inPlace: true,
		trees: map[string][]byte{}, cutoff: h.now().Add(-racyWindow).UnixNano(), room: h.budget - h.size, budgeted: h.budget > 0,
		tooLarge: h.tooLarge,
		watch:    h.watch, rescan: ancestors(dirty), prevDirs: h.dirs, dirs: h.dirs}
	if len(dirty) == 0 {
		h.hashed = 0
		return h.lastScan, sc, nil
	}
	tree, err := sc.scanDir(h.ws, ".", false)
	h.hashed = sc.hashed
	h.size += sc.newBytes
	if err != nil {
		// What was marked dirty is lost with the error: the next scan walks everything.
		h.dirs = nil
		return tree, sc, err
	}
	// Trees of earlier scans not yet stored stay pending: this tree may reach them.
	if h.pending == nil {
		h.pending = map[string][]byte{}
	}
	maps.Copy(h.pending, sc.trees)
	h.lastScan = tree
	return tree, sc, nil
}

// record writes sc's trees and appends a checkpoint of tree, without saving the index.
func (h *History) record(tree string, sc *scanner, cause, message, restores string) (Checkpoint, error) {
	for _, data := range h.pending { // the scan's trees, and any earlier scan's they reuse
		_, n, err := h.blobs.put(data)
		if err != nil {
			return Checkpoint{}, fmt.Errorf("checkpoint (the workspace is untouched): %w", err)
		}
		h.size += n
	}
	c, err := h.appendCheckpoint(tree, sc, cause, message, restores)
	if err == nil {
		h.pending = nil // stored
	}
	return c, err
}

// appendCheckpoint appends a checkpoint of tree and keeps sc's stat cache, leaving the
// trees pending and the index unsaved.
func (h *History) appendCheckpoint(tree string, sc *scanner, cause, message, restores string) (Checkpoint, error) {
	c := Checkpoint{Parent: h.idx.Pos, Time: h.now().UTC(), Cause: cause, Message: message,
		Restores: restores, Tree: tree}
	if parent, ok := h.get(h.idx.Pos); ok {
		d, err := h.diffTrees(parent.Tree, tree)
		if err != nil {
			return Checkpoint{}, err
		}
		c.Changed = len(d.Added) + len(d.Changed) + len(d.Removed)
	} else {
		d, err := h.diffTrees("", tree)
		if err != nil {
			return Checkpoint{}, err
		}
		c.Changed = len(d.Added)
	}
	if err := h.saveCache(sc); err != nil {
		return Checkpoint{}, err
	}
	h.idx.Seq++
	c.ID = strconv.Itoa(h.idx.Seq)
	h.idx.Checkpoints = append(h.idx.Checkpoints, c)
	h.byID[c.ID] = len(h.idx.Checkpoints) - 1
	return c, nil
}

// saveCache keeps the scan's stat cache. It is not fsynced: a cache lost or stale after a
// crash only costs re-hashing (a stale entry still names the content that had that stat),
// and a torn one decodes as corrupt and is dropped.
func (h *History) saveCache(sc *scanner) error {
	if sc.inPlace {
		if !sc.cacheChanged {
			return nil
		}
		sc.cacheChanged = false
	} else if maps.Equal(h.cache, sc.newCache) {
		return nil
	}
	h.cache = sc.newCache
	return replaceFile(filepath.Join(h.dir, statFile), encodeStatCache(h.cache), false)
}

func (h *History) saveIndex() error {
	return writeJSON(filepath.Join(h.dir, indexFile), &h.idx)
}

// saveIndexWith stores blobs and then saves the index as saveIndex does, with the fsyncs
// of the blobs and of the index's new content in one batch (blobStore.putAll): the index
// is renamed into place only once every blob is durable under its name.
func (h *History) saveIndexWith(blobs map[string][]byte) error {
	data, err := json.Marshal(&h.idx)
	if err != nil {
		return fmt.Errorf("encode %s: %w", indexFile, err)
	}
	tmp, err := os.CreateTemp(h.dir, "."+indexFile+"-")
	if err != nil {
		return storeErr("create "+indexFile, err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	defer tmp.Close()
	if _, err := tmp.Write(data); err != nil {
		return storeErr("write "+indexFile, err)
	}
	n, err := h.blobs.putAll(blobs, tmp)
	if err != nil {
		return err
	}
	h.size += n
	if err := tmp.Close(); err != nil {
		return storeErr("close "+indexFile, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(h.dir, indexFile)); err != nil {
		return storeErr("replace "+indexFile, err)
	}
	return syncDir(h.dir)
}

// tree returns the entries of tree blob sum ("" is the empty tree).
func (h *History) tree(sum string) ([]entry, error) {
	if sum == "" {
		return nil, nil
	}
	if es, ok := h.trees[sum]; ok {
		return es, nil
	}
	data, ok := h.pending[sum]
	if !ok {
		var err error
		if data, err = h.blobs.read(sum); err != nil {
			return nil, err
		}
	}
	var es []entry
	if err := jsonUnmarshal(data, &es); err != nil {
		return nil, fmt.Errorf("tree %s is corrupt: %v: %w", sum[:12], err, errdefs.ErrDataLoss)
	}
	for _, e := range es {
		if err := checkName(e.Name); err != nil {
			return nil, fmt.Errorf("tree %s: %w", sum[:12], err)
		}
	}
	if len(h.trees) >= maxCachedTrees {
		clear(h.trees)
	}
	h.trees[sum] = es
	return es, nil
}

// checkName refuses a stored name that could address anything but one entry of its
// directory; the store is trusted, but a corrupt one must not make restore write elsewhere.
func checkName(n string) error {
	if n == "" || n == "." || n == ".." || filepath.Base(n) != n || len(n) > 255 {
		return fmt.Errorf("stored name %q is not a file name: %w", n, errdefs.ErrDataLoss)
	}
	return nil
}

// Diff lists the paths that differ from checkpoint a to checkpoint b.
func (h *History) Diff(a, b string) (DiffResult, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ca, err := h.lookup(a)
	if err != nil {
		return DiffResult{}, err
	}
	cb, err := h.lookup(b)
	if err != nil {
		return DiffResult{}, err
	}
	return h.diffTrees(ca.Tree, cb.Tree)
}

func (h *History) diffTrees(a, b string) (DiffResult, error) {
	var d DiffResult
	err := h.diffDir(&d, "", a, b)
	return d, err
}

func (h *History) diffDir(d *DiffResult, prefix, a, b string) error {
	if a == b {
		return nil
	}
	ea, err := h.tree(a)
	if err != nil {
		return err
	}
	eb, err := h.tree(b)
	if err != nil {
		return err
	}
	ma := make(map[string]entry, len(ea))
	for _, e := range ea {
		ma[e.Name] = e
	}
	for _, e := range eb {
		p := prefix + e.Name
		old, ok := ma[e.Name]
		delete(ma, e.Name)
		switch {
		case !ok:
			d.Added = append(d.Added, p)
			if e.Kind == kindDir {
				if err := h.diffDir(d, p+"/", "", e.Hash); err != nil {
					return err
				}
			}
		case old.Kind == kindDir && e.Kind == kindDir:
			if old.Mode != e.Mode {
				d.Changed = append(d.Changed, p)
			}
			if err := h.diffDir(d, p+"/", old.Hash, e.Hash); err != nil {
				return err
			}
		case !old.same(e):
			d.Changed = append(d.Changed, p)
			if old.Kind == kindDir {
				if err := h.diffDir(d, p+"/", old.Hash, ""); err != nil {
					return err
				}
			} else if e.Kind == kindDir {
				if err := h.diffDir(d, p+"/", "", e.Hash); err != nil {
					return err
				}
			}
		}
	}
	for _, e := range ea {
		if _, gone := ma[e.Name]; !gone {
			continue
		}
		p := prefix + e.Name
		d.Removed = append(d.Removed, p)
		if e.Kind == kindDir {
			if err := h.diffDir(d, p+"/", e.Hash, ""); err != nil {
				return err
			}
		}
	}
	return nil
}

// maxCachedTrees bounds the parsed trees kept in memory; past it the cache starts over.
const maxCachedTrees = 4096

func (d DiffResult) empty() bool {
	return len(d.Added)+len(d.Changed)+len(d.Removed) == 0
}

func sumHex(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
