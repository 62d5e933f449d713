package files

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire/agentv1"
)

func (s *Service) mkdir(req *agentv1.MkdirRequest) (*agentv1.FileInfo, error) {
	p := req.GetPath()
	rel, err := resolve(p)
	if err != nil {
		return nil, err
	}
	mode, err := parseMode(req.GetMode(), 0o755)
	if err != nil {
		return nil, fmt.Errorf("mkdir %q: %w", p, err)
	}
	err = s.root.Mkdir(rel, mode.Perm())
	if req.GetParents() && errors.Is(err, fs.ErrNotExist) {
		err = s.root.MkdirAll(rel, mode.Perm())
	}
	if req.GetParents() && errors.Is(err, fs.ErrExist) {
		return s.existingDir(p, rel)
	}
	if err != nil {
		return nil, s.fsError("mkdir", p, err)
	}
	return s.chmodDir(p, rel, mode)
}

// existingDir is Mkdir's answer when, with parents, the directory is already there: like
// mkdir -p, success, leaving its mode alone; but a file in the way is an error.
func (s *Service) existingDir(p, rel string) (*agentv1.FileInfo, error) {
	fi, err := s.root.Lstat(rel)
	if err != nil {
		return nil, s.fsError("mkdir", p, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("mkdir %q: exists and is not a directory: %w", p, errdefs.ErrAlreadyExists)
	}
	return infoOf(rel, fi, ""), nil
}

// chmodDir gives a directory we just created exactly the requested mode: mkdir's mode is
// cut by the umask and cannot carry setgid or sticky. It goes through a descriptor so a
// swap cannot redirect it.
func (s *Service) chmodDir(p, rel string, mode fs.FileMode) (*agentv1.FileInfo, error) {
	f, err := s.root.OpenFile(rel, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return nil, s.fsError("mkdir", p, err)
	}
	defer f.Close()
	if err := f.Chmod(mode); err != nil {
		return nil, s.fsError("mkdir", p, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, s.fsError("mkdir", p, err)
	}
	return infoOf(rel, fi, ""), nil
}

func (s *Service) move(req *agentv1.MoveRequest) (*agentv1.FileInfo, error) {
	from, to, err := resolveMove(req)
	if err != nil {
		return nil, err
	}
	var flags uint
	if !req.GetOverwrite() {
		flags = unix.RENAME_NOREPLACE
	}
	if err := s.renameat(from, to, flags); err != nil {
		return nil, s.fsError("move "+strconv.Quote(req.GetFrom())+" to", req.GetTo(), err)
	}
	info, err := describe(s.root, to, to)
	if err != nil {
		return nil, s.fsError("move", req.GetTo(), err)
	}
	return info, nil
}

func resolveMove(req *agentv1.MoveRequest) (from, to string, err error) {
	if from, err = resolve(req.GetFrom()); err != nil {
		return "", "", err
	}
	if to, err = resolve(req.GetTo()); err != nil {
		return "", "", err
	}
	if from == "." || to == "." {
		return "", "", fmt.Errorf("move %q to %q: the workspace itself cannot be moved or replaced: %w",
			req.GetFrom(), req.GetTo(), errdefs.ErrInvalidArgument)
	}
	return from, to, nil
}

// renameat renames between the two parent directories, each opened through the root. The
// names are single components and rename never follows a final symlink, so neither end can
// leave the workspace; RENAME_NOREPLACE makes "unless it exists" atomic, which os.Root's
// Rename cannot.
func (s *Service) renameat(from, to string, flags uint) error {
	fromDir, err := s.openDir(path.Dir(from))
	if err != nil {
		return err
	}
	defer fromDir.Close()
	toDir, err := s.openDir(path.Dir(to))
	if err != nil {
		return err
	}
	defer toDir.Close()
	err = unix.Renameat2(int(fromDir.Fd()), path.Base(from), int(toDir.Fd()), path.Base(to), flags)
	return os.NewSyscallError("renameat2", err)
}

func (s *Service) openDir(rel string) (*os.File, error) {
	return s.root.OpenFile(rel, os.O_RDONLY|syscall.O_DIRECTORY, 0)
}

func (s *Service) remove(req *agentv1.RemoveRequest) error {
	p := req.GetPath()
	rel, err := resolve(p)
	if err != nil {
		return err
	}
	if rel == "." {
		return fmt.Errorf("remove %q: the workspace itself cannot be removed: %w", p, errdefs.ErrInvalidArgument)
	}
	if !req.GetRecursive() {
		return s.fsError("remove", p, s.root.Remove(rel))
	}
	// RemoveAll succeeds on a missing path; the caller should hear that nothing was there.
	if _, err := s.root.Lstat(rel); err != nil {
		return s.fsError("remove", p, err)
	}
	return s.fsError("remove", p, s.root.RemoveAll(rel))
}
