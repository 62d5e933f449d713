package bench

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// renameWatch notes when a file is renamed into place in a directory, as the host sees it
// (inotify's IN_MOVED_TO): where an edit's way in ends and the dev server's work starts.
type renameWatch struct {
	fd   int
	name string
	mu   sync.Mutex
	at   time.Time // the last rename, zero after reset
	seen chan struct{}
}

// watchRenames watches dir for renames of name into it.
func watchRenames(dir, name string) (*renameWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_MOVED_TO); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("inotify: watch %s: %w", dir, err)
	}
	w := &renameWatch{fd: fd, name: name, seen: make(chan struct{}, 1)}
	go w.run()
	return w, nil
}

func (w *renameWatch) run() {
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(w.fd, buf)
		if err != nil || n <= 0 {
			return // closed
		}
		now := time.Now()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if string(bytes.TrimRight(name, "\x00")) != w.name {
				continue
			}
			w.mu.Lock()
			w.at = now
			w.mu.Unlock()
			select {
			case w.seen <- struct{}{}:
			default:
			}
		}
	}
}

// reset forgets the last rename: call it before an edit.
func (w *renameWatch) reset() {
	w.mu.Lock()
	w.at = time.Time{}
	w.mu.Unlock()
	select {
	case <-w.seen:
	default:
	}
}

// last is when the file was renamed into place since reset, waiting for it a while.
func (w *renameWatch) last() (time.Time, error) {
	for deadline := time.After(10 * time.Second); ; {
		w.mu.Lock()
		at := w.at
		w.mu.Unlock()
		if !at.IsZero() {
			return at, nil
		}
		select {
		case <-w.seen:
		case <-deadline:
			return time.Time{}, fmt.Errorf("%s was not renamed into place within 10 s", w.name)
		}
	}
}

func (w *renameWatch) Close() error {
	if w == nil {
		return nil
	}
	return unix.Close(w.fd)
}

// findFile finds the directory below root holding rel (a slash path whose last element is
// a file's name): a sandbox's workspace as the host sees it.
func findFile(root, rel string) (string, error) {
	var found string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error { // it returns no error of its own
		if err == nil && !d.IsDir() && strings.HasSuffix(filepath.ToSlash(p), "/"+rel) {
			found = filepath.Dir(p)
			return fs.SkipAll
		}
		return nil // a directory the walk may not enter is skipped
	})
	if found == "" {
		return "", fmt.Errorf("no %s below %s: %w", rel, root, os.ErrNotExist)
	}
	return found, nil
}
