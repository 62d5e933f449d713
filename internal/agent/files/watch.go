package files

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire"
	"github.com/paddockhq/paddock/internal/wire/agentv1"
)

// eventKinds maps fsnotify's ops to the wire's kinds, in the order we report them.
var eventKinds = []struct {
	op   fsnotify.Op
	kind agentv1.FileEventKind
}{
	{fsnotify.Create, agentv1.FileEventKind_FILE_EVENT_KIND_CREATE},
	{fsnotify.Write, agentv1.FileEventKind_FILE_EVENT_KIND_WRITE},
	{fsnotify.Remove, agentv1.FileEventKind_FILE_EVENT_KIND_REMOVE},
	{fsnotify.Rename, agentv1.FileEventKind_FILE_EVENT_KIND_RENAME},
	{fsnotify.Chmod, agentv1.FileEventKind_FILE_EVENT_KIND_CHMOD},
}

type watchStream = grpc.ServerStreamingServer[agentv1.FileEvent]

// watcher is one Watch call.
//
// inotify watches by path name and follows symlinks, and fsnotify offers no way to pass
// IN_DONT_FOLLOW. So that no swap between our check and inotify_add_watch can point a watch
// outside the workspace, each file or directory is opened through the root first and
// watched as /proc/self/fd/N: the kernel resolves that magic link to the very inode we
// opened. The descriptor is held for as long as the watch, so N cannot be reused under it.
type watcher struct {
	s         *Service
	stream    watchStream
	fsw       *fsnotify.Watcher
	recursive bool
	top       string
	// watched maps a watch's /proc/self/fd/N name to the open file and its workspace path.
	watched map[string]watchedFile
}

type watchedFile struct {
	f   *os.File
	rel string
}

func (s *Service) watch(req *agentv1.WatchRequest, stream watchStream) error {
	p := req.GetPath()
	rel, err := wire.ResolvePath(p)
	if err != nil {
		return err
	}
	fsw, err := fsnotify.NewBufferedWatcher(256)
	if err != nil {
		return s.fsError("watch", p, err)
	}
	w := &watcher{s: s, stream: stream, fsw: fsw, recursive: req.GetRecursive(), top: rel, watched: map[string]watchedFile{}}
	defer w.close()
	if err := w.start(); err != nil {
		return s.fsError("watch", p, err)
	}
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	return s.fsError("watch", p, w.loop(stream.Context()))
}

// start watches the top path: a regular file, or a directory and, when recursive, every
// directory under it that is not behind a symlink.
func (w *watcher) start() error {
	f, err := w.s.root.OpenFile(w.top, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err == nil && !fi.IsDir() && !fi.Mode().IsRegular() {
		err = fmt.Errorf("not a regular file or directory: %w", errdefs.ErrInvalidArgument)
	}
	if err != nil {
		f.Close()
		return err
	}
	if err := w.add(w.top, f); err != nil || !fi.IsDir() || !w.recursive {
		return err
	}
	return w.scan(w.top, f, false)
}

// addTree watches the directory rel and, walking it, every directory beneath. When
// announce is set the directory is new: its Create is sent once its watch is in place, and
// everything already in it is reported as created, since inotify saw none of that.
// A directory that vanished or was swapped for something else before we opened it is
// skipped: its parent's watch reports that change.
func (w *watcher) addTree(rel string, announce bool) error {
	f, err := w.s.root.OpenFile(rel, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		w.s.log.Debug("watch: skipping a directory", "path", rel, "err", err)
		return w.announce(announce, rel)
	}
	if err := w.add(rel, f); err != nil {
		return err
	}
	if err := w.announce(announce, rel); err != nil {
		return err
	}
	return w.scan(rel, f, announce)
}

// scan walks the entries of the directory open as f. Directories are told apart with
// Lstat, so a symlink to one is never descended.
func (w *watcher) scan(rel string, f *os.File, announce bool) error {
	for {
		names, err := f.Readdirnames(256)
		for _, name := range names {
			if err := w.scanEntry(path.Join(rel, name), announce); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (w *watcher) scanEntry(rel string, announce bool) error {
	fi, err := w.s.root.Lstat(rel)
	if err != nil {
		return nil // gone already; the parent's watch reports its removal
	}
	if fi.IsDir() {
		return w.addTree(rel, announce)
	}
	return w.announce(announce, rel)
}

// announce reports rel as created when it is new to the caller.
func (w *watcher) announce(announce bool, rel string) error {
	if !announce {
		return nil
	}
	return w.send(agentv1.FileEventKind_FILE_EVENT_KIND_CREATE, rel)
}

// add puts an inotify watch on the file open as f, which it takes over.
func (w *watcher) add(rel string, f *os.File) error {
	if len(w.watched) >= w.s.maxWatches {
		f.Close()
		return fmt.Errorf("more than %d directories to watch (watch a smaller tree): %w", w.s.maxWatches, errdefs.ErrLimitExceeded)
	}
	name := "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
	if err := w.fsw.Add(name); err != nil {
		f.Close()
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("watching needs /proc mounted in the sandbox: %w", errdefs.ErrUnavailable)
		}
		return err
	}
	w.watched[name] = watchedFile{f: f, rel: rel}
	return nil
}

func (w *watcher) loop(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return nil
			}
			if err := w.handle(ev); err != nil {
				return err
			}
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return nil
			}
			if err := w.watchError(err); err != nil {
				return err
			}
		}
	}
}

// watchError ends the stream when events were lost, since a caller mirroring the tree
// could not otherwise know; other errors concern one watch only and are logged.
func (w *watcher) watchError(err error) error {
	if errors.Is(err, fsnotify.ErrEventOverflow) {
		return fmt.Errorf("too many changes at once, events were lost (watch again): %w", errdefs.ErrLimitExceeded)
	}
	w.s.log.Warn("watch error", "path", w.top, "err", err)
	return nil
}

func (w *watcher) handle(ev fsnotify.Event) error {
	rel, self, ok := w.relOf(ev.Name)
	if !ok {
		return nil
	}
	if self && rel != w.top {
		// The directory's parent reports this too; the watch is gone, so free its descriptor.
		if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
			w.release(ev.Name)
		}
		return nil
	}
	if ev.Has(fsnotify.Create) && w.recursive && !self {
		if fi, err := w.s.root.Lstat(rel); err == nil && fi.IsDir() {
			return w.addTree(rel, true)
		}
	}
	return w.sendOps(ev.Op, rel)
}

// sendOps sends one event per op in op: inotify may fold several into one.
func (w *watcher) sendOps(op fsnotify.Op, rel string) error {
	for _, k := range eventKinds {
		if op.Has(k.op) {
			if err := w.send(k.kind, rel); err != nil {
				return err
			}
		}
	}
	return nil
}

// relOf maps an event's name to its workspace path; self says the event is about a
// watched file or directory itself rather than an entry in it.
func (w *watcher) relOf(name string) (rel string, self, ok bool) {
	if wf, ok := w.watched[name]; ok {
		return wf.rel, true, true
	}
	wf, ok := w.watched[filepath.Dir(name)]
	if !ok {
		return "", false, false
	}
	return path.Join(wf.rel, filepath.Base(name)), false, true
}

func (w *watcher) send(kind agentv1.FileEventKind, rel string) error {
	return w.stream.Send(&agentv1.FileEvent{Kind: kind, Path: rel})
}

func (w *watcher) release(name string) {
	w.watched[name].f.Close()
	delete(w.watched, name)
}

func (w *watcher) close() {
	w.fsw.Close()
	for _, wf := range w.watched {
		wf.f.Close()
	}
}
