package history

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// restoreTree makes the workspace exactly tree sum (see restoreDir), then makes all of it
// durable with one syncfs(2) per file system it wrote to, instead of an fsync per file.
//
// Why a crash at any point still ends wholly old or wholly new. The journal is durable
// (fsynced, with its directory) before the first change to the workspace, and is removed
// only after the index that records the operation is durable; and that index is written
// only after this sync has returned. So:
//
//   - a crash before the journal is durable leaves the workspace untouched: the old state;
//   - a crash after it, before the sync returns, may leave any mix of old entries, new
//     ones, files partly written (created at their name or rewritten in place), and (after
//     a power loss) new files whose rename reached the disk but whose data did not (empty
//     or short files). The index still says the old state and the journal
//     is there, so Open rolls forward: restoreDir applies the target again, every step
//     idempotent, and rewrites every file whose stat it cannot match to a stat-cache entry
//     of the target's content. A file torn by the crash matches none (its ctime is new): the stat cache
//     file is only written after a scan, which comes after the sync (so an entry of a
//     restored file names bytes that were on disk), and entries of the files the restore
//     put in memory (writeGroup.remember) died with the process. Then it syncs and records;
//   - a crash after the sync returns leaves the new state on disk; rolling forward finds
//     it and records it, or finds it recorded (the index moved past the journal's Seq).
//
// One syncfs costs about what the slowest fsyncs would, where an fsync per file waits for
// each file's journal commit in turn, which dominates a large restore.
func (h *History) restoreTree(sum, have string) error {
	h.syncer = fsSyncer{}
	defer h.syncer.close()
	h.writes, h.written, h.openDirs = newFilePool(RestoreWorkers()), &writeGroup{}, &openDirs{}
	defer func() {
		h.writes.close()
		h.writes, h.written, h.openDirs = nil, nil, nil
	}()
	fi, err := h.ws.Stat(".")
	if err != nil {
		return wsErr("stat", ".", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return wsErr("stat", ".", fmt.Errorf("no stat data"))
	}
	if err := h.syncer.note(h.ws, st.Dev); err != nil {
		return wsErr("open directory", ".", err)
	}
	if err := h.openDirs.finish(h, h.restoreDir(h.ws, ".", sum, have)); err != nil {
		return err
	}
	n, err := h.syncer.sync()
	h.syncs += n
	return err
}

// fsSyncer holds a directory of each file system a restore writes to (a workspace may hold
// a mount point), to syncfs each at the end.
type fsSyncer map[uint64]*os.File

// note remembers dir's file system (dev) if it is new.
func (s fsSyncer) note(dir *os.Root, dev uint64) error {
	if s == nil {
		return nil
	}
	if _, ok := s[dev]; ok {
		return nil
	}
	f, err := dir.Open(".")
	if err != nil {
		return err
	}
	s[dev] = f
	return nil
}

// sync flushes every file system noted and says how many.
func (s fsSyncer) sync() (int, error) {
	for _, f := range s {
		if err := unix.Syncfs(int(f.Fd())); err != nil {
			return 0, fmt.Errorf("sync the restored workspace to disk: %w", kindOf(err))
		}
	}
	return len(s), nil
}

func (s fsSyncer) close() {
	for _, f := range s {
		f.Close()
	}
}
