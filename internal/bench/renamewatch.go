package bench

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// renameWatch notes when a file is renamed into place in a directory, as the host sees it
// (inotify's IN_MOVED_TO): where an edit's way in ends and the dev server's work starts.
type renameWatch struct {
	f    *os.File // the inotify descriptor, non-blocking: Close ends a read under way
	name string
	at   chan time.Time // each rename of name, as read
}

// watchRenames watches dir for renames of name into it.
func watchRenames(dir, name string) (*renameWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_MOVED_TO); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("inotify: watch %s: %w", dir, err)
	}
	w := &renameWatch{f: os.NewFile(uintptr(fd), "inotify"), name: name, at: make(chan time.Time, 16)}
	go w.run()
	return w, nil
}

func (w *renameWatch) run() {
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil || n <= 0 {
			return // closed
		}
		now := time.Now()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if string(bytes.TrimRight(name, "\x00")) == w.name {
				select {
				case w.at <- now:
				default: // nobody is timing an edit: dropped
				}
			}
		}
	}
}

// reset forgets the renames seen so far: call it before an edit.
func (w *renameWatch) reset() {
	for {
		select {
		case <-w.at:
		default:
			return
		}
	}
}

// next is when the file was first renamed into place since reset, waiting for it a while.
func (w *renameWatch) next() (time.Time, error) {
	select {
	case at := <-w.at:
		return at, nil
	case <-time.After(10 * time.Second):
		return time.Time{}, fmt.Errorf("%s was not renamed into place within 10 s", w.name)
	}
}

func (w *renameWatch) Close() error {
	if w == nil {
		return nil
	}
	return w.f.Close()
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
