package filearchive

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Local is a directory of this machine as a Source and a Sink. Every path stays inside
// it (os.Root), symlinks included.
type Local struct {
	root *os.Root
}

var (
	_ Source = (*Local)(nil)
	_ Sink   = (*Local)(nil)
)

// OpenLocal opens directory dir.
func OpenLocal(dir string) (*Local, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, localError(err)
	}
	return &Local{root: root}, nil
}

// Close releases the directory.
func (l *Local) Close() error { return l.root.Close() }

func (l *Local) Stat(_ context.Context, p string) (Entry, error) {
	fi, err := l.root.Lstat(p)
	if err != nil {
		return Entry{}, localError(err)
	}
	return l.entry(p, fi)
}

func (l *Local) entry(p string, fi fs.FileInfo) (Entry, error) {
	e := Entry{Path: p, Size: fi.Size(), Mode: fi.Mode().Perm(), ModTime: fi.ModTime()}
	switch {
	case fi.Mode().IsRegular():
		e.Type = File
	case fi.IsDir():
		e.Type, e.Size = Dir, 0
	case fi.Mode()&fs.ModeSymlink != 0:
		link, err := l.root.Readlink(p)
		if err != nil {
			return Entry{}, localError(err)
		}
		e.Type, e.Link, e.Size = Symlink, link, 0
	}
	return e, nil
}

func (l *Local) ReadDir(_ context.Context, p string) ([]Entry, error) {
	f, err := l.root.Open(p)
	if err != nil {
		return nil, localError(err)
	}
	defer f.Close()
	infos, err := f.Readdir(-1)
	if err != nil {
		return nil, localError(err)
	}
	out := make([]Entry, 0, len(infos))
	for _, fi := range infos {
		e, err := l.entry(path.Join(p, fi.Name()), fi)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

func (l *Local) Open(_ context.Context, e Entry) (io.ReadCloser, error) {
	f, err := l.root.Open(e.Path)
	if err != nil {
		return nil, localError(err)
	}
	return f, nil
}

func (l *Local) Mkdir(_ context.Context, p string, mode fs.FileMode) error {
	if mode == 0 {
		mode = 0o755
	}
	return localError(l.root.MkdirAll(p, mode))
}

func (l *Local) WriteFile(_ context.Context, p string, mode fs.FileMode, size int64, r io.Reader) error {
	if err := l.root.MkdirAll(path.Dir(p), 0o755); err != nil {
		return localError(err)
	}
	f, err := l.root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode|0o200)
	if err != nil {
		return localError(err)
	}
	_, err = io.CopyN(f, r, size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = l.root.Chmod(p, mode)
	}
	return localError(err)
}

func (l *Local) Symlink(_ context.Context, p, target string) error {
	if err := l.root.MkdirAll(path.Dir(p), 0o755); err != nil {
		return localError(err)
	}
	return localError(l.root.Symlink(target, p))
}

// localError puts a local file error in the taxonomy, naming the path.
func localError(err error) error {
	var pe *fs.PathError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: %w", trimPathError(err, pe), errdefs.ErrNotFound)
	case errors.Is(err, fs.ErrExist):
		return fmt.Errorf("%s: %w", trimPathError(err, pe), errdefs.ErrAlreadyExists)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%s: %w", trimPathError(err, pe), errdefs.ErrPermissionDenied)
	}
	return fmt.Errorf("%s: %w", trimPathError(err, pe), errdefs.ErrInvalidArgument)
}

func trimPathError(err error, pe *fs.PathError) string {
	if errors.As(err, &pe) {
		return filepath.ToSlash(pe.Path) + ": " + pe.Err.Error()
	}
	return err.Error()
}
