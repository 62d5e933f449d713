package history

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Restore operations, as recorded in the journal.
const (
	opRestore = "restore"
	opUndo    = "undo"
	opRedo    = "redo"
	// opAbort puts the workspace back to Tree, the state a restore started from, after the
	// restore found a blob it needs corrupt: rolling forward could never finish, and would
	// leave every later operation refused.
	opAbort = "abort"
)

// journal is written before a restore changes the workspace and removed once the restore
// checkpoint is in the index. Open finding it means the restore may be half-applied: it is
// applied again from the start (every step is idempotent) and then recorded.
//
// A transaction's commit and rollback are journaled the same way (Op commit or rollback,
// Tx naming the transaction): Open finishes them, and a transaction no longer open in the
// index means the operation was recorded.
type journal struct {
	Op     string `json:"op"`
	Target string `json:"target"`
	// Seq is the index's sequence number before the restore; if the index has moved past
	// it, the restore was recorded and only the journal's removal was lost.
	Seq int `json:"seq"`
	// Tx is the transaction a commit or rollback closes.
	Tx string `json:"tx,omitempty"`
	// Tree is the tree a rollback restores (the workspace as it was at Begin).
	Tree string `json:"tree,omitempty"`
}

// Restore makes the workspace exactly checkpoint id's state, in place, and records a restore
// checkpoint. Changes not yet checkpointed are checkpointed first, so nothing is lost; undo
// after a restore goes back to the state before it.
func (h *History) Restore(id string) (Checkpoint, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.finishPending(); err != nil {
		return Checkpoint{}, err
	}
	if h.idx.Tx != nil {
		return Checkpoint{}, h.txOpenErr("restore")
	}
	if _, err := h.lookup(id); err != nil {
		return Checkpoint{}, err
	}
	if _, _, err := h.checkpoint(CauseWatcher, "changes found before restore", false); err != nil {
		return Checkpoint{}, err
	}
	return h.run(journal{Op: opRestore, Target: id, Seq: h.idx.Seq}, h.lastScan)
}

// Undo restores the parent of the current position.
func (h *History) Undo() (Checkpoint, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.finishPending(); err != nil {
		return Checkpoint{}, err
	}
	if h.idx.Tx != nil {
		return Checkpoint{}, h.txOpenErr("undo")
	}
	if _, _, err := h.checkpoint(CauseWatcher, "changes found before undo", false); err != nil {
		return Checkpoint{}, err
	}
	cur, ok := h.get(h.idx.Pos)
	if !ok {
		return Checkpoint{}, fmt.Errorf("nothing to undo: the history has no checkpoint yet: %w", errdefs.ErrFailedPrecondition)
	}
	if cur.Parent == "" {
		if h.idx.Compacted > 0 {
			return Checkpoint{}, fmt.Errorf("nothing to undo: checkpoint %s is the oldest left in the history (%d older ones were compacted to keep it within its size budget): %w", cur.ID, h.idx.Compacted, errdefs.ErrFailedPrecondition)
		}
		return Checkpoint{}, fmt.Errorf("nothing to undo: checkpoint %s is the first in the history: %w", cur.ID, errdefs.ErrFailedPrecondition)
	}
	return h.run(journal{Op: opUndo, Target: cur.Parent, Seq: h.idx.Seq}, h.lastScan)
}

// Redo goes forward to the checkpoint the last Undo left, unless a change since forked the
// timeline.
func (h *History) Redo() (Checkpoint, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.finishPending(); err != nil {
		return Checkpoint{}, err
	}
	if h.idx.Tx != nil {
		return Checkpoint{}, h.txOpenErr("redo")
	}
	if _, _, err := h.checkpoint(CauseWatcher, "changes found before redo", false); err != nil {
		return Checkpoint{}, err
	}
	if len(h.idx.Redo) == 0 {
		if h.idx.ForkedBy != "" {
			return Checkpoint{}, fmt.Errorf("nothing to redo: checkpoint %s changed the workspace after the last undo, which started a new timeline: %w", h.idx.ForkedBy, errdefs.ErrFailedPrecondition)
		}
		return Checkpoint{}, fmt.Errorf("nothing to redo: no undo to take back: %w", errdefs.ErrFailedPrecondition)
	}
	return h.run(journal{Op: opRedo, Target: h.idx.Redo[len(h.idx.Redo)-1], Seq: h.idx.Seq}, h.lastScan)
}

// run applies j: journal, restore the files, record, drop the journal. have is the tree the
// workspace was just scanned as, so that subtrees already in the target state are skipped
// whole; "" (after a crash, when the workspace is in an unknown state) checks everything.
// A failure leaves the journal and the index as they were on disk, so that finishing the
// operation later starts from the same record.
func (h *History) run(j journal, have string) (Checkpoint, error) {
	jp := filepath.Join(h.dir, journalFile)
	if err := writeJSON(jp, j); err != nil {
		return Checkpoint{}, fmt.Errorf("%s: could not start (the workspace is untouched): %w", j.Op, err)
	}
	saved := h.idx
	saved.Checkpoints, saved.Redo = slices.Clone(h.idx.Checkpoints), slices.Clone(h.idx.Redo)
	c, err := h.applyStepped(j, have)
	if err != nil {
		h.idx = saved
		h.reindex()
		if back, ok := h.abortable(j, err); ok {
			return Checkpoint{}, h.abort(j, back, err)
		}
		// The workspace may be half-restored: nothing else may touch it or the history
		// until this operation is finished (see finishPending).
		h.unfinished = &j
		if isRestoreOp(j.Op) {
			err = fmt.Errorf("%w (the workspace is partly restored: the journal finishes it on the next history call, or when the history is next opened)", err)
		}
		return Checkpoint{}, err
	}
	h.unfinished = nil
	if err := h.step(); err != nil { // a crash after the index was written
		h.unfinished = &j
		return Checkpoint{}, err
	}
	if err := os.Remove(jp); err != nil {
		return c, storeErr("remove journal", err)
	}
	if err := syncDir(h.dir); err != nil {
		return c, err
	}
	return c, h.enforceBudget()
}

func isRestoreOp(op string) bool { return op == opRestore || op == opUndo || op == opRedo }

// abortable says whether a failed restore should be taken back rather than finished later,
// and to which tree: when a blob it needs is corrupt or missing (ErrDataLoss), retrying
// cannot succeed. Every restore checkpoints the workspace first, so the state it started
// from is the current position's tree, whose blobs were just read or written.
func (h *History) abortable(j journal, err error) (string, bool) {
	if !isRestoreOp(j.Op) || !errors.Is(err, errdefs.ErrDataLoss) || h.idx.Seq != j.Seq {
		return "", false
	}
	cur, ok := h.get(h.idx.Pos)
	return cur.Tree, ok
}

// abort puts the workspace back to tree back after restore j failed with cause, journaled like
// any restore (a crash halfway finishes the abort on Open), and records nothing: the
// position stays where it was. If putting it back fails too, that is left pending like any
// failed restore.
func (h *History) abort(j journal, back string, cause error) error {
	a := journal{Op: opAbort, Target: j.Target, Seq: h.idx.Seq, Tree: back}
	if _, err := h.run(a, ""); err != nil {
		return fmt.Errorf("%s to checkpoint %s failed (%w) and putting the workspace back failed too: %w", j.Op, j.Target, cause, err)
	}
	return takenBack{fmt.Errorf("%s to checkpoint %s refused, the workspace is as it was before it: %w", j.Op, j.Target, cause)}
}

// takenBack marks the error of a restore that abort took back: the operation failed, but
// the workspace and the history are whole, so recovery at Open may go on.
type takenBack struct{ error }

func (e takenBack) Unwrap() error { return e.error }

// applyAbort restores the tree a refused restore started from; the index does not change.
func (h *History) applyAbort(j journal) (Checkpoint, error) {
	if err := h.restoreTree(j.Tree, ""); err != nil {
		return Checkpoint{}, fmt.Errorf("put the workspace back after a refused restore to checkpoint %s: %w", j.Target, err)
	}
	cur, _ := h.get(h.idx.Pos)
	return cur, nil
}

// applyStepped is apply after a crash point: the journal is written, nothing else is done.
func (h *History) applyStepped(j journal, have string) (Checkpoint, error) {
	if err := h.step(); err != nil {
		return Checkpoint{}, err
	}
	return h.apply(j, have)
}

func (h *History) apply(j journal, have string) (Checkpoint, error) {
	switch j.Op {
	case opCommit:
		return h.applyCommit(j)
	case opRollback:
		return h.applyRollback(j, have)
	case opImport:
		return h.applyImport(j, have)
	case opAbort:
		return h.applyAbort(j)
	}
	target, err := h.lookup(j.Target)
	if err != nil {
		return Checkpoint{}, err
	}
	if h.idx.Seq != j.Seq { // already recorded before a crash
		c := h.idx.Checkpoints[len(h.idx.Checkpoints)-1]
		return c, nil
	}
	if err := h.restoreTree(target.Tree, have); err != nil {
		return Checkpoint{}, fmt.Errorf("%s to checkpoint %s: %w", j.Op, j.Target, err)
	}
	tree, sc, err := h.scan()
	if err != nil {
		return Checkpoint{}, err
	}
	from := h.idx.Pos
	c, err := h.record(tree, sc, CauseRestore, fmt.Sprintf("%s to checkpoint %s", j.Op, j.Target), j.Target)
	if err != nil {
		return Checkpoint{}, err
	}
	switch j.Op {
	case opUndo:
		h.idx.Redo = append(h.idx.Redo, from)
		h.idx.Pos = j.Target
	case opRedo:
		if n := len(h.idx.Redo); n > 0 {
			h.idx.Redo = h.idx.Redo[:n-1]
		}
		h.idx.Pos = j.Target
	default:
		if len(h.idx.Redo) > 0 {
			h.idx.Redo, h.idx.ForkedBy = nil, c.ID
		}
		h.idx.Pos = c.ID
	}
	return c, h.saveIndex()
}

// finishPending retries a restore that failed partway in this process, before anything else
// may read or change the workspace: recording or undoing a half-restored workspace would
// lose the state the restore started from.
func (h *History) finishPending() error {
	if h.unfinished == nil {
		return nil
	}
	j := *h.unfinished
	if _, err := h.run(j, ""); err != nil {
		return fmt.Errorf("an earlier %s stopped partway and still cannot finish; fix the cause and retry: %w", describeOp(j), err)
	}
	return nil
}

// recover finishes an operation a crash interrupted (a restore, a commit or a rollback), then
// rolls back a transaction left open, and says what it did in h.recovered.
func (h *History) recover() error {
	var j journal
	found, err := readJSON(filepath.Join(h.dir, journalFile), &j)
	if err != nil {
		return err
	}
	var did []string
	if found {
		c, err := h.run(j, "")
		var back takenBack
		switch {
		case errors.As(err, &back):
			did = append(did, fmt.Sprintf("could not finish an interrupted %s, so put the workspace back as it was before it: %v", describeOp(j), err))
		case err != nil:
			return fmt.Errorf("finish interrupted %s: %w", describeOp(j), err)
		default:
			did = append(did, recoveredMessage(j, c))
		}
	}
	if h.idx.Tx != nil {
		msg, err := h.rollbackLeftOpen()
		if err != nil {
			return err
		}
		did = append(did, msg)
	}
	h.recovered = strings.Join(did, "; ")
	return nil
}

func describeOp(j journal) string {
	switch j.Op {
	case opCommit, opRollback:
		return j.Op + " of transaction " + j.Tx
	case opAbort:
		return "putting the workspace back after a refused restore to checkpoint " + j.Target
	}
	return j.Op + " to checkpoint " + j.Target
}

// recoveredMessage says which state an operation finished by recovery left the workspace
// in: the old (a rollback) or the new (a restore, a commit).
func recoveredMessage(j journal, c Checkpoint) string {
	switch j.Op {
	case opCommit:
		if c.Transaction == j.Tx {
			return fmt.Sprintf("finished an interrupted commit of transaction %s: the workspace is wholly its committed state, checkpoint %s", j.Tx, c.ID)
		}
		return fmt.Sprintf("finished an interrupted commit of transaction %s, which changed nothing: the workspace is wholly checkpoint %s", j.Tx, c.ID)
	case opAbort:
		return fmt.Sprintf("finished putting the workspace back after a restore to checkpoint %s was refused for a corrupt history store: the workspace is wholly its state before that restore (checkpoint %s)", j.Target, c.ID)
	case opImport:
		return fmt.Sprintf("finished an interrupted import: the history is the imported one and the workspace is wholly its checkpoint %s", c.ID)
	case opRollback:
		return fmt.Sprintf("finished an interrupted rollback of transaction %s: the workspace is wholly its state at the transaction's start (checkpoint %s)", j.Tx, j.Target)
	}
	return fmt.Sprintf("finished an interrupted %s to checkpoint %s: the workspace is wholly that checkpoint's state", j.Op, j.Target)
}

// restoreDir makes directory dir (workspace path rel) hold exactly tree sum. have is the
// tree dir was last scanned as ("" when unknown): if it is sum, dir is already right. Its
// files are queued to h.writes; it returns without waiting for them (see openDirs).
func (h *History) restoreDir(dir *os.Root, rel, sum, have string) error {
	if have != "" && have == sum {
		return nil
	}
	want, err := h.tree(sum)
	if err != nil {
		return err
	}
	haveSub := map[string]string{}
	if have != "" {
		hs, err := h.tree(have)
		if err != nil {
			return err
		}
		for _, e := range hs {
			if e.Kind == kindDir {
				haveSub[e.Name] = e.Hash
			}
		}
	}
	names, err := readNames(dir)
	if err != nil {
		return wsErr("read directory", rel, err)
	}
	keep := make(map[string]bool, len(want))
	for _, e := range want {
		keep[e.Name] = true
	}
	for _, n := range names {
		if !keep[n] {
			if err := dir.RemoveAll(n); err != nil {
				return wsErr("remove", path.Join(rel, n), err)
			}
			if err := h.step(); err != nil {
				return err
			}
		}
	}
	for _, e := range want {
		if err := h.restoreEntry(dir, h.written, path.Join(rel, e.Name), e, haveSub[e.Name]); err != nil {
			return err
		}
	}
	return nil
}

func (h *History) restoreEntry(dir *os.Root, g *writeGroup, rel string, e entry, have string) error {
	fi, err := dir.Lstat(e.Name)
	if err != nil && !isNotExist(err) {
		return wsErr("stat", rel, err)
	}
	exists := err == nil
	switch e.Kind {
	case kindDir:
		return h.restoreSubdir(dir, rel, e, fi, exists, have)
	case kindLink:
		if exists && fi.Mode()&fs.ModeSymlink != 0 {
			if t, err := dir.Readlink(e.Name); err == nil && t == e.Target {
				return nil
			}
		}
		return h.replace(dir, rel, e, fi, exists, func(tmp string) error {
			if err := dir.Symlink(e.Target, tmp); err != nil {
				return wsErr("create symlink", rel, err)
			}
			if h.owner != nil {
				if err := dir.Lchown(tmp, h.owner.uid, h.owner.gid); err != nil {
					return wsErr("chown", rel, err)
				}
			}
			return nil
		})
	case kindFile:
		if exists && fi.Mode().IsRegular() {
			if c, ok := h.cache[rel]; ok && c.Key == keyOf(fi) && c.Hash == e.Hash && fi.Mode()&modeBits == e.Mode {
				return nil // unchanged since the last scan
			}
		}
		return h.writes.submit(g, func(buf []byte) error {
			return h.restoreFile(dir, g, rel, e, fi, exists, buf)
		})
	}
	return fmt.Errorf("checkpoint entry %q has unknown kind %q: %w", rel, e.Kind, errdefs.ErrDataLoss)
}

func (h *History) restoreSubdir(dir *os.Root, rel string, e entry, fi fs.FileInfo, exists bool, have string) error {
	if exists && !fi.IsDir() {
		if err := dir.Remove(e.Name); err != nil {
			return wsErr("remove", rel, err)
		}
		if err := h.step(); err != nil {
			return err
		}
		exists, have = false, ""
	}
	created := !exists
	if !exists {
		if err := dir.Mkdir(e.Name, 0o700); err != nil {
			return wsErr("create directory", rel, err)
		}
		if err := h.step(); err != nil {
			return err
		}
		var err error
		if fi, err = dir.Lstat(e.Name); err != nil {
			return wsErr("stat", rel, err)
		}
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return wsErr("stat", rel, errors.New("no stat data"))
	}
	sub, err := openSubdir(dir, e.Name, st.Dev, st.Ino)
	if err != nil {
		return wsErr("open directory", rel, err)
	}
	// Closed by h.openDirs once the files queued in it are written, even on error.
	od := h.openDirs.open(sub, rel)
	if err := h.syncer.note(sub, st.Dev); err != nil {
		return wsErr("open directory", rel, err)
	}
	if created && h.owner != nil {
		// Through the directory just opened and checked, not its name, which the sandbox
		// could have swapped meanwhile.
		if err := sub.Chown(".", h.owner.uid, h.owner.gid); err != nil {
			return wsErr("chown", rel, err)
		}
	}
	if have != e.Hash { // else its content was scanned as exactly the target's
		if perm := fi.Mode().Perm(); perm&0o300 != 0o300 {
			// A read-only directory's content must still be restored; its mode is set after.
			if err := sub.Chmod(".", perm|0o300); err != nil {
				return wsErr("chmod", rel, err)
			}
		}
		if err := h.restoreDir(sub, rel, e.Hash, have); err != nil {
			return err
		}
	}
	od.mode, od.mtime, od.done = e.Mode&modeBits, e.Mtime, true
	return h.openDirs.trim(h)
}

// replace creates the new entry under a temp name with create, then renames it over the
// name: rename replaces a file or link without following it, and the name is never absent
// or half-written. A directory in the way is removed first (rename cannot replace one).
func (h *History) replace(dir *os.Root, rel string, e entry, fi fs.FileInfo, exists bool, create func(tmp string) error) error {
	if exists && fi.IsDir() {
		if err := dir.RemoveAll(e.Name); err != nil {
			return wsErr("remove", rel, err)
		}
		if err := h.step(); err != nil {
			return err
		}
	}
	tmp := tempPrefix + randomSuffix()
	if err := create(tmp); err != nil {
		_ = dir.Remove(tmp) // best effort: the temporary name is ours
		return err
	}
	if err := dir.Rename(tmp, e.Name); err != nil {
		_ = dir.Remove(tmp) // best effort: the temporary name is ours
		return wsErr("replace", rel, err)
	}
	if err := h.step(); err != nil {
		return err
	}
	return nil
}

// restoreFile writes file e of dir (workspace path rel) from its blob, on one of the
// pool's workers, and notes the stat of what it wrote in g. Where nothing is at the name
// (an emptied workspace, a file the target adds), it creates the file there directly:
// there is nothing to replace atomically, and a crash before the restore is recorded
// leaves at worst a partly written new file, which the roll forward rewrites like any
// file whose stat it cannot match (see restoreTree). Otherwise it writes a temporary
// file and renames it over the name.
func (h *History) restoreFile(dir *os.Root, g *writeGroup, rel string, e entry, fi fs.FileInfo, exists bool, buf []byte) error {
	if h.writing != nil {
		h.writing()
	}
	if exists && fi.Mode().IsRegular() {
		if done, err := h.rewriteFile(dir, g, rel, e, fi, buf); done || err != nil {
			return err
		}
	}
	if !exists {
		done, err := h.createFile(dir, g, rel, e, buf)
		if done || err != nil {
			return err
		}
		// Something appeared at the name since the stat: replace it.
		if fi, err = dir.Lstat(e.Name); err != nil {
			return wsErr("stat", rel, err)
		}
		exists = true
	}
	var written *os.File
	err := h.replace(dir, rel, e, fi, exists, func(tmp string) error {
		var err error
		written, err = h.writeFile(dir, tmp, e, buf)
		return err
	})
	if written != nil {
		if err == nil {
			g.remember(rel, written, e.Hash)
		}
		written.Close()
	}
	return err
}

// createFile writes file e at its own name, which must not exist. It reports false,
// having written nothing, when something is at the name after all.
func (h *History) createFile(dir *os.Root, g *writeGroup, rel string, e entry, buf []byte) (bool, error) {
	f, err := h.writeFile(dir, e.Name, e, buf)
	if f == nil {
		if errors.Is(err, fs.ErrExist) {
			return false, nil
		}
		return false, err
	}
	if err == nil {
		g.remember(rel, f, e.Hash)
	}
	f.Close()
	if err != nil {
		// The name was free: take the partial file away, best effort.
		_ = dir.Remove(e.Name)
		return false, err
	}
	return true, h.step()
}

// writeFile creates name (O_EXCL) and writes blob e.Hash into it (see fill). It returns
// the file still open (so that its stat can be taken once it has its final name), or nil
// if it could not create it; the caller closes it, even on error.
func (h *History) writeFile(dir *os.Root, name string, e entry, buf []byte) (*os.File, error) {
	src, err := h.blobs.open(e.Hash)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	f, err := dir.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, wsErr("create", name, err)
	}
	return f, h.fill(f, name, e, src, buf, false)
}

// rewriteFile writes file e over the regular file at its name, in place: no inode to
// allocate and none to free, which is most of what a temporary file and a rename cost.
// Only a file that is nowhere else is written so (one link, the inode just stat'ed), so
// that nothing outside the workspace can be reached through a hard link; a file busy as
// a running program, or that cannot be opened, is replaced instead (it reports false,
// having written nothing). A reader may see the file partly written while the restore
// runs, as with git; a crash before the restore is recorded is rolled forward.
func (h *History) rewriteFile(dir *os.Root, g *writeGroup, rel string, e entry, fi fs.FileInfo, buf []byte) (bool, error) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Nlink != 1 {
		return false, nil
	}
	src, err := h.blobs.open(e.Hash)
	if err != nil {
		return false, err
	}
	defer src.Close()
	// O_NONBLOCK: a FIFO swapped in since the stat must not block the open.
	f, err := dir.OpenFile(e.Name, os.O_WRONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return false, nil
	}
	defer f.Close()
	now, err := f.Stat()
	if err != nil {
		return false, nil
	}
	ost, ok := now.Sys().(*syscall.Stat_t)
	if !ok || !now.Mode().IsRegular() || ost.Dev != st.Dev || ost.Ino != st.Ino || ost.Nlink != 1 {
		return false, nil
	}
	if err := h.fill(f, rel, e, src, buf, true); err != nil {
		return true, err
	}
	g.remember(rel, f, e.Hash)
	return true, h.step()
}

// fill copies blob src into f from its start through buf, then gives f e's owner (see
// WithOwner), mode and mtime through the open file. inPlace cuts off what was there
// past the new content. It does not fsync: restoreTree syncs the whole file system once,
// at the end.
func (h *History) fill(f *os.File, name string, e entry, src io.Reader, buf []byte, inPlace bool) error {
	if h.owner != nil {
		// Before Chmod: a chown clears setuid and setgid bits.
		if err := f.Chown(h.owner.uid, h.owner.gid); err != nil {
			return wsErr("chown", name, err)
		}
	}
	n, err := copyBlob(f, src, buf)
	if err != nil {
		if errors.Is(err, errdefs.ErrDataLoss) { // the blob, not the workspace; it names itself
			return err
		}
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			return fmt.Errorf("restore %q: the workspace's disk is full (no space left; free some and retry): %w", e.Name, kindOf(stripPath(err)))
		}
		return wsErr("restore", e.Name, err)
	}
	if inPlace {
		if err := f.Truncate(n); err != nil {
			return wsErr("truncate", name, err)
		}
	}
	if err := f.Chmod(e.Mode & modeBits); err != nil {
		return wsErr("chmod", name, err)
	}
	if err := futimens(f, e.Mtime); err != nil {
		return wsErr("set times", name, err)
	}
	return nil
}

// futimens sets f's access and modification times to mtime (ns since the epoch) through
// the open file, without a path lookup.
func futimens(f *os.File, mtime int64) error {
	ts := [2]unix.Timespec{unix.NsecToTimespec(mtime), unix.NsecToTimespec(mtime)}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		// utimensat(fd, NULL, times, 0) is futimens(3).
		_, _, errno = unix.Syscall6(unix.SYS_UTIMENSAT, fd, 0, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	}); err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}

func jsonUnmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// errCrash stands for the process dying, in tests that stop a restore partway.
var errCrash = errors.New("simulated crash")

// step counts one change to the workspace; a test sets crashAfter to stop a restore after
// that many, as a SIGKILL would.
func (h *History) step() error {
	h.stepMu.Lock()
	defer h.stepMu.Unlock()
	if h.crashAfter == 0 {
		return nil
	}
	h.crashAfter--
	if h.crashAfter == 0 {
		return errCrash
	}
	return nil
}
