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
	"syscall"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Restore operations, as recorded in the journal.
const (
	opRestore = "restore"
	opUndo    = "undo"
	opRedo    = "redo"
)

// journal is written before a restore changes the workspace and removed once the restore
// checkpoint is in the index. Open finding it means the restore may be half-applied: it is
// applied again from the start (every step is idempotent) and then recorded.
type journal struct {
	Op     string `json:"op"`
	Target string `json:"target"`
	// Seq is the index's sequence number before the restore; if the index has moved past
	// it, the restore was recorded and only the journal's removal was lost.
	Seq int `json:"seq"`
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
	if _, err := h.lookup(id); err != nil {
		return Checkpoint{}, err
	}
	if _, _, err := h.checkpoint(CauseWatcher, "changes found before restore"); err != nil {
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
	if _, _, err := h.checkpoint(CauseWatcher, "changes found before undo"); err != nil {
		return Checkpoint{}, err
	}
	cur, ok := h.get(h.idx.Pos)
	if !ok {
		return Checkpoint{}, fmt.Errorf("nothing to undo: the history has no checkpoint yet: %w", errdefs.ErrFailedPrecondition)
	}
	if cur.Parent == "" {
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
	if _, _, err := h.checkpoint(CauseWatcher, "changes found before redo"); err != nil {
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
func (h *History) run(j journal, have string) (Checkpoint, error) {
	jp := filepath.Join(h.dir, journalFile)
	if err := writeJSON(jp, j); err != nil {
		return Checkpoint{}, fmt.Errorf("%s: could not start (the workspace is untouched): %w", j.Op, err)
	}
	c, err := h.apply(j, have)
	if err != nil {
		// The workspace may be half-restored: nothing else may touch it or the history
		// until this restore is finished (see finishPending).
		h.unfinished = &j
		return Checkpoint{}, err
	}
	h.unfinished = nil
	if err := os.Remove(jp); err != nil {
		return c, storeErr("remove journal", err)
	}
	return c, syncDir(h.dir)
}

func (h *History) apply(j journal, have string) (Checkpoint, error) {
	target, err := h.lookup(j.Target)
	if err != nil {
		return Checkpoint{}, err
	}
	if h.idx.Seq != j.Seq { // already recorded before a crash
		c := h.idx.Checkpoints[len(h.idx.Checkpoints)-1]
		return c, nil
	}
	if err := h.restoreDir(h.ws, ".", target.Tree, have); err != nil {
		return Checkpoint{}, fmt.Errorf("%s to checkpoint %s: %w (the journal will finish it when the history is next opened)", j.Op, j.Target, err)
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
		return fmt.Errorf("an earlier %s to checkpoint %s stopped partway and still cannot finish; fix the cause and retry: %w", j.Op, j.Target, err)
	}
	return nil
}

// recover finishes a restore a crash interrupted.
func (h *History) recover() error {
	var j journal
	found, err := readJSON(filepath.Join(h.dir, journalFile), &j)
	if err != nil || !found {
		return err
	}
	if _, err := h.run(j, ""); err != nil {
		return fmt.Errorf("finish interrupted %s to checkpoint %s: %w", j.Op, j.Target, err)
	}
	h.recovered = fmt.Sprintf("finished an interrupted %s to checkpoint %s: the workspace is wholly that checkpoint's state", j.Op, j.Target)
	return nil
}

// restoreDir makes directory dir (workspace path rel) hold exactly tree sum. have is the
// tree dir was last scanned as ("" when unknown): if it is sum, dir is already right.
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
		if err := h.restoreEntry(dir, path.Join(rel, e.Name), e, haveSub[e.Name]); err != nil {
			return err
		}
	}
	return nil
}

func (h *History) restoreEntry(dir *os.Root, rel string, e entry, have string) error {
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
		return h.replace(dir, rel, e, fi, exists, func(tmp string) error { return h.writeTemp(dir, tmp, e) })
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
	defer sub.Close()
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
	if err := sub.Chmod(".", e.Mode); err != nil {
		return wsErr("chmod", rel, err)
	}
	t := time.Unix(0, e.Mtime)
	if err := sub.Chtimes(".", t, t); err != nil {
		return wsErr("set times", rel, err)
	}
	return nil
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
		dir.Remove(tmp)
		return err
	}
	if err := dir.Rename(tmp, e.Name); err != nil {
		dir.Remove(tmp)
		return wsErr("replace", rel, err)
	}
	if err := h.step(); err != nil {
		return err
	}
	return nil
}

// writeTemp writes blob e.Hash as tmp with e's mode and mtime, durably.
func (h *History) writeTemp(dir *os.Root, tmp string, e entry) error {
	src, err := h.blobs.open(e.Hash)
	if err != nil {
		return err
	}
	defer src.Close()
	f, err := dir.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return wsErr("create", tmp, err)
	}
	defer f.Close()
	if h.owner != nil {
		// Before Chmod: a chown clears setuid and setgid bits.
		if err := f.Chown(h.owner.uid, h.owner.gid); err != nil {
			return wsErr("chown", tmp, err)
		}
	}
	if _, err := io.Copy(f, src); err != nil {
		return fmt.Errorf("restore file: %w", kindOf(err))
	}
	if err := f.Chmod(e.Mode); err != nil {
		return wsErr("chmod", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return wsErr("sync", tmp, err)
	}
	t := time.Unix(0, e.Mtime)
	return dir.Chtimes(tmp, t, t)
}

func jsonUnmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// errCrash stands for the process dying, in tests that stop a restore partway.
var errCrash = errors.New("simulated crash")

// step counts one change to the workspace; a test sets crashAfter to stop a restore after
// that many, as a SIGKILL would.
func (h *History) step() error {
	if h.crashAfter == 0 {
		return nil
	}
	h.crashAfter--
	if h.crashAfter == 0 {
		return errCrash
	}
	return nil
}
