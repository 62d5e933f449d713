package history

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// watcher tracks which workspace directories changed since the last scan, with inotify:
// one watch per directory, added by the scan as it reads the directory (so that a change
// is either seen by the scan's readdir or reported after it), keyed by the directory's
// workspace path.
//
// It is read synchronously, under the History's lock, at the start of each scan (and by
// Activity): a change is queued by the kernel before the system call that made it returns,
// so a checkpoint taken after a write always sees it. No goroutine reads it meanwhile
// (WaitChange only waits for it to be readable): the kernel's
// queue holds max_queued_events (16,384 by default), and past that IN_Q_OVERFLOW makes
// the next checkpoint a full walk, as does anything else the watcher cannot account for
// (a watch that cannot be added, the workspace itself moved, a directory seen at two
// paths). healthy false means "walk everything next time".
//
// What inotify does not report, and the watcher therefore misses until the next full walk:
// writes through a shared mmap, and writes through a hard link whose other name is in a
// directory outside the workspace or in another watched directory (the event goes to the
// directory of the name used). Restore, undo, redo, transactions and Reconcile always walk
// the whole workspace.
type watcher struct {
	fd int
	// file holds fd for the runtime's poller, so that wait can block until events are
	// queued without reading them (and without a thread); closing it wakes a waiter.
	file *os.File
	// seen counts the events read so far: it grows while the workspace keeps changing.
	seen    uint64
	wds     map[int32]string // watch descriptor → the workspace path of its directory
	paths   map[string]int32
	dirty   map[string]bool // directories whose entries may have changed
	healthy bool
	buf     []byte
}

// watchMask is every change to a directory's entries or to what a scan records of them.
const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CLOSE_WRITE | unix.IN_DELETE_SELF |
	unix.IN_MOVE_SELF | unix.IN_ONLYDIR

func newWatcher() (*watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("watch the workspace: inotify: %w", kindOf(err))
	}
	return &watcher{fd: fd, file: os.NewFile(uintptr(fd), "inotify"), wds: map[int32]string{},
		paths: map[string]int32{}, dirty: map[string]bool{}, buf: make([]byte, 64<<10)}, nil
}

func (w *watcher) close() {
	if w != nil && w.fd >= 0 {
		w.file.Close()
		w.fd = -1
	}
}

// waitQueued blocks until the kernel has an event queued on f (an inotify instance opened
// non-blocking), ctx ends or f is closed. It reads nothing: the events stay for drain.
func waitQueued(ctx context.Context, f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	err = rc.Read(func(fd uintptr) bool {
		// The poller reports edges: ask the kernel whether events are already queued, and
		// wait for the next edge only when none is.
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(p, 0)
		return err != nil && !errors.Is(err, unix.EINTR) || n > 0
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// add watches directory rel, open as dirfd. The watch goes through /proc/self/fd, which
// names the directory that was opened (and checked) through its os.Root, never a path the
// sandbox could swap for a link meanwhile.
func (w *watcher) add(rel string, dirfd int) {
	wd, err := unix.InotifyAddWatch(w.fd, "/proc/self/fd/"+strconv.Itoa(dirfd), watchMask)
	if err != nil { // ENOSPC (max_user_watches), no /proc: walk every time
		w.healthy = false
		return
	}
	id := int32(wd)
	if old, ok := w.wds[id]; ok && old != rel && w.paths[old] == id {
		// One directory at two paths (a bind mount): its events would name one of them.
		w.healthy = false
	}
	if old, ok := w.paths[rel]; ok && old != id && w.wds[old] == rel {
		delete(w.wds, old) // another directory was here before
		_, _ = unix.InotifyRmWatch(w.fd, uint32(old))
	}
	w.wds[id], w.paths[rel] = rel, id
}

// watching says whether directory rel has a watch that has reported on it since it was
// added, under that path.
func (w *watcher) watching(rel string) bool {
	_, ok := w.paths[rel]
	return ok
}

// restart begins a full walk: every queued event is read (and then forgotten, the walk
// sees it all), and the watches are added again as the walk finds the directories, under
// their current paths; finish removes the ones the walk did not find.
func (w *watcher) restart() map[int32]string {
	w.drain()
	old := w.wds
	w.wds, w.paths, w.healthy = map[int32]string{}, map[string]int32{}, true
	clear(w.dirty)
	return old
}

// finish drops the watches of directories the full walk no longer found (moved out of the
// workspace or removed).
func (w *watcher) finish(old map[int32]string) {
	for wd := range old {
		if _, ok := w.wds[wd]; !ok {
			_, _ = unix.InotifyRmWatch(w.fd, uint32(wd))
		}
	}
}

// take reads every queued event and returns the directories changed since the last take,
// or ok false when some change may have gone unseen.
func (w *watcher) take() (dirty map[string]bool, ok bool) {
	w.drain()
	if !w.healthy {
		return nil, false
	}
	dirty, w.dirty = w.dirty, map[string]bool{}
	return dirty, true
}

func (w *watcher) drain() {
	for {
		n, err := unix.Read(w.fd, w.buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n <= 0 {
			if err != nil && !errors.Is(err, unix.EAGAIN) {
				w.healthy = false
			}
			return
		}
		w.parse(w.buf[:n])
	}
}

func (w *watcher) parse(b []byte) {
	for len(b) >= unix.SizeofInotifyEvent {
		wd := int32(binary.NativeEndian.Uint32(b[0:]))
		mask := binary.NativeEndian.Uint32(b[4:])
		nameLen := int(binary.NativeEndian.Uint32(b[12:]))
		end := unix.SizeofInotifyEvent + nameLen
		if end > len(b) {
			w.healthy = false
			return
		}
		name := strings.TrimRight(string(b[unix.SizeofInotifyEvent:end]), "\x00")
		b = b[end:]
		w.seen++
		w.event(wd, mask, name)
	}
}

// event records one inotify event: a change to an entry makes its directory dirty; a
// directory that appears, goes or moves has its watches (and its subtree's) forgotten,
// so that the next scan walks it whole and watches it under its new path.
func (w *watcher) event(wd int32, mask uint32, name string) {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		w.healthy = false
		return
	}
	rel, ok := w.wds[wd]
	if mask&unix.IN_IGNORED != 0 {
		if ok {
			delete(w.wds, wd)
			if w.paths[rel] == wd {
				delete(w.paths, rel)
			}
		}
		return
	}
	if !ok {
		return // a watch forgotten with its subtree, which the next scan walks whole
	}
	if mask&unix.IN_UNMOUNT != 0 {
		w.healthy = false
		return
	}
	if name == "" { // the directory itself
		switch {
		case rel == "." && mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0:
			w.healthy = false // the workspace itself moved or went
		case rel != "" && rel != "." && mask&unix.IN_ATTRIB != 0:
			w.dirty[path.Dir(rel)] = true // its mode or mtime, recorded in its parent's tree
		}
		return
	}
	w.dirty[rel] = true
	if mask&unix.IN_ISDIR != 0 && mask&(unix.IN_CREATE|unix.IN_DELETE|unix.IN_MOVED_FROM|unix.IN_MOVED_TO) != 0 {
		w.forget(path.Join(rel, name))
	}
}

// forget drops the watches of directory p and every directory under it.
func (w *watcher) forget(p string) {
	prefix := p + "/"
	for q, wd := range w.paths {
		if q != p && !strings.HasPrefix(q, prefix) {
			continue
		}
		delete(w.paths, q)
		if w.wds[wd] == q {
			delete(w.wds, wd)
			_, _ = unix.InotifyRmWatch(w.fd, uint32(wd))
		}
	}
}

// ancestors is dirty plus every directory on the path from each to the workspace root:
// the directories whose trees a scan of the dirty ones must build again.
func ancestors(dirty map[string]bool) map[string]bool {
	out := make(map[string]bool, len(dirty)*3)
	for d := range dirty {
		for p := d; !out[p]; p = path.Dir(p) {
			out[p] = true
			if p == "." || p == "/" {
				break
			}
		}
	}
	return out
}

// ErrNoWatcher is WaitChange's answer when the History has no inotify watcher to wait on
// (opened without WithWatcher, or inotify could not be had): the caller must poll.
var ErrNoWatcher = errors.New("history has no workspace watcher")

// WaitChange blocks until a change to the workspace has been seen that no checkpoint has
// recorded yet, or ctx ends (ctx.Err()). It returns at once when such a change was
// already read (by Activity), and ErrNoWatcher without a watcher. A change it reports may
// turn out to be nothing a checkpoint records (a file written with what it held).
func (h *History) WaitChange(ctx context.Context) error {
	h.mu.Lock()
	w := h.watch
	if w == nil || w.fd < 0 {
		h.mu.Unlock()
		return ErrNoWatcher
	}
	pending := len(w.dirty) > 0
	f := w.file
	h.mu.Unlock()
	if pending {
		return nil
	}
	return waitQueued(ctx, f)
}

// Activity reads the events the watcher has queued and returns how many it has read since
// the History was opened: a caller that sees the count still growing knows the workspace
// is still changing (see the agent's debouncing). 0 without a watcher.
func (h *History) Activity() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.watch == nil || h.watch.fd < 0 {
		return 0
	}
	h.watch.drain()
	return h.watch.seen
}
