package files

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/capability"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/policy"
	"github.com/paddockhq/paddock/internal/wire"
	"github.com/paddockhq/paddock/internal/wire/agentv1"
)

func (s *Service) mkdir(ctx context.Context, req *agentv1.MkdirRequest) (*agentv1.FileInfo, error) {
	p := req.GetPath()
	rel, err := wire.ResolvePath(p)
	if err != nil {
		return nil, err
	}
	mode, err := parseMode(req.GetMode(), 0o755)
	if err != nil {
		return nil, fmt.Errorf("mkdir %q: %w", p, err)
	}
	g := grantOf(req)
	if req.GetParents() {
		if err := s.mkdirParents(ctx, g, p, rel, mode.Perm()); err != nil {
			return nil, err
		}
	}
	// The directory is made in its parent, opened once: what the token is verified on is
	// where it is made, whatever is swapped for a symlink meanwhile.
	dir, err := s.root.OpenRoot(path.Dir(rel))
	if err != nil {
		return nil, s.fsError("mkdir", p, err)
	}
	defer dir.Close()
	name := path.Base(rel)
	if g.Set() {
		if _, err := s.allowIn(ctx, g, "mkdir", p, capability.Write, dir, name, 0); err != nil {
			return nil, err
		}
	}
	err = dir.Mkdir(name, mode.Perm())
	if req.GetParents() && errors.Is(err, fs.ErrExist) {
		return s.existingDir(p, dir, name, rel)
	}
	if err != nil {
		return nil, s.fsError("mkdir", p, err)
	}
	return s.chmodDir(p, dir, name, rel, mode)
}

// mkdirParents makes rel's missing parents, as mkdir -p does. Under a capability token
// the directory is verified first, where its deepest existing ancestor is and the rest
// below it, so that a refused request makes nothing.
func (s *Service) mkdirParents(ctx context.Context, g Grant, p, rel string, perm fs.FileMode) error {
	if g.Set() {
		if err := s.allowNew(ctx, g, "mkdir", p, capability.Write, rel); err != nil {
			return err
		}
	}
	if err := s.root.MkdirAll(path.Dir(rel), perm); err != nil {
		return s.parentsError("mkdir", p, err)
	}
	return nil
}

// existingDir is Mkdir's answer when, with parents, the directory is already there: like
// mkdir -p, success, leaving its mode alone; but a file in the way is an error.
func (s *Service) existingDir(p string, dir *os.Root, name, rel string) (*agentv1.FileInfo, error) {
	fi, err := dir.Lstat(name)
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
func (s *Service) chmodDir(p string, dir *os.Root, name, rel string, mode fs.FileMode) (*agentv1.FileInfo, error) {
	f, err := dir.OpenFile(name, os.O_RDONLY|syscall.O_DIRECTORY, 0)
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

func (s *Service) move(ctx context.Context, req *agentv1.MoveRequest) (*agentv1.FileInfo, error) {
	from, to, err := resolveMove(req)
	if err != nil {
		return nil, err
	}
	var flags uint
	if !req.GetOverwrite() {
		flags = unix.RENAME_NOREPLACE
	}
	op := "move " + strconv.Quote(req.GetFrom()) + " to"
	if err := s.renameat(ctx, grantOf(req), op, req.GetTo(), from, to, flags); err != nil {
		if flags == 0 && errors.Is(err, unix.EEXIST) {
			// A rename that may replace fails so only onto a directory that is not empty:
			// POSIX lets a file system say EEXIST for it (XFS does) or ENOTEMPTY (ext4).
			err = unix.ENOTEMPTY
		}
		return nil, s.fsError(op, req.GetTo(), err)
	}
	info, err := describe(s.root, to, to)
	if err != nil {
		return nil, s.fsError("move", req.GetTo(), err)
	}
	return info, nil
}

func resolveMove(req *agentv1.MoveRequest) (from, to string, err error) {
	if from, err = wire.ResolvePath(req.GetFrom()); err != nil {
		return "", "", err
	}
	if to, err = wire.ResolvePath(req.GetTo()); err != nil {
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
// Rename cannot. A capability token is verified on the opened directories: delete on
// from's place, write on to's.
func (s *Service) renameat(ctx context.Context, g Grant, op, p, from, to string, flags uint) error {
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
	if g.Set() {
		if err := s.allowAt(ctx, g, op, p, capability.Delete, policy.Delete, fromDir, path.Base(from)); err != nil {
			return err
		}
		// What arrives at to: a file is written there; a directory is made there, as
		// far as the policy goes (deny_write applies, extensions and sizes do not).
		arrives := policy.Write
		var st unix.Stat_t
		if unix.Fstatat(int(fromDir.Fd()), path.Base(from), &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			arrives = policy.Mkdir
		}
		if err := s.allowAt(ctx, g, op, p, capability.Write, arrives, toDir, path.Base(to)); err != nil {
			return err
		}
	}
	err = unix.Renameat2(int(fromDir.Fd()), path.Base(from), int(toDir.Fd()), path.Base(to), flags)
	return os.NewSyscallError("renameat2", err)
}

func (s *Service) openDir(rel string) (*os.File, error) {
	return s.root.OpenFile(rel, os.O_RDONLY|syscall.O_DIRECTORY, 0)
}

func (s *Service) remove(ctx context.Context, req *agentv1.RemoveRequest) error {
	p := req.GetPath()
	rel, err := wire.ResolvePath(p)
	if err != nil {
		return err
	}
	if rel == "." {
		return fmt.Errorf("remove %q: the workspace itself cannot be removed: %w", p, errdefs.ErrInvalidArgument)
	}
	// Removed from its parent, opened once: a capability token is verified on where that
	// parent is, whatever is swapped for a symlink meanwhile.
	dir, err := s.root.OpenRoot(path.Dir(rel))
	if err != nil {
		return s.fsError("remove", p, err)
	}
	defer dir.Close()
	name := path.Base(rel)
	if g := grantOf(req); g.Set() {
		if _, err := s.allowIn(ctx, g, "remove", p, capability.Delete, dir, name, 0); err != nil {
			return err
		}
	}
	if !req.GetRecursive() {
		return s.fsError("remove", p, dir.Remove(name))
	}
	// RemoveAll succeeds on a missing path; the caller should hear that nothing was there.
	if _, err := dir.Lstat(name); err != nil {
		return s.fsError("remove", p, err)
	}
	return s.fsError("remove", p, dir.RemoveAll(name))
}
