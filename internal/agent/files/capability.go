package files

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"

	"google.golang.org/grpc/codes"

	"github.com/paddockhq/paddock/internal/capability"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/policy"
	"github.com/paddockhq/paddock/internal/wire"
)

// Grant is what a request carries that limits it beyond the workspace: a capability
// token, the policy in force (its YAML), or both. Both are decided on the file the
// request really acts on.
type Grant struct {
	Token  string
	Policy string
}

// Set says whether the grant limits anything.
func (g Grant) Set() bool { return g.Token != "" || g.Policy != "" }

// grantOf is what a request message carries.
func grantOf(m interface {
	GetCapability() string
	GetPolicy() string
}) Grant {
	return Grant{Token: m.GetCapability(), Policy: m.GetPolicy()}
}

// Guard verifies the grant a request carries against the file the request really acts
// on. The agent's guard holds its keyring and loads policies; a request without a grant
// is not shown to it.
type Guard interface {
	// Allow returns nil when g allows action (op, in the policy's terms) on path — where
	// the file is in the sandbox's view, /workspace and below, symlinks resolved — for
	// size bytes, or the refusal. maxSize is the smallest max_size of the token, its
	// caveats and the policy's max_file_size, 0 for none: a write stops as soon as it
	// passes it.
	Allow(ctx context.Context, g Grant, action capability.Action, op policy.Op, path string, size int64) (maxSize int64, err error)
}

// GuardWith makes every later request that carries a capability token be verified by g
// before it acts. Without a guard such a request is refused.
func (s *Service) GuardWith(g Guard) { s.guard = g }

// allow verifies token for action on the file at where, for the operation op on the
// caller's path p; the refusal names both.
func (s *Service) allow(ctx context.Context, g Grant, op, p string, action capability.Action, where string, size int64) (int64, error) {
	return s.allowAs(ctx, g, op, p, action, policyOp(op, action), where, size)
}

// allowAs is allow with the policy's operation given, where the action does not say it.
func (s *Service) allowAs(ctx context.Context, g Grant, op, p string, action capability.Action, pop policy.Op, where string, size int64) (int64, error) {
	if s.guard == nil {
		return 0, fmt.Errorf("%s %q: the request carries a capability token or a policy, and this service verifies none: %w", op, p, errdefs.ErrFailedPrecondition)
	}
	maxSize, err := s.guard.Allow(ctx, g, action, pop, where, size)
	if err != nil {
		return 0, fmt.Errorf("%s %q: %w", op, p, err)
	}
	return maxSize, nil
}

// policyOp is the policy's name for what op does with action: a new directory is a
// mkdir (deny_write applies to it, extensions and sizes do not).
func policyOp(op string, action capability.Action) policy.Op {
	switch {
	case op == "mkdir":
		return policy.Mkdir
	case action == capability.Read:
		return policy.Read
	case action == capability.Delete:
		return policy.Delete
	}
	return policy.Write
}

// allowIn is allow on the entry name of the directory dir.
func (s *Service) allowIn(ctx context.Context, g Grant, op, p string, action capability.Action, dir *os.Root, name string, size int64) (int64, error) {
	where, err := s.whereIn(dir, name)
	if err != nil {
		return 0, s.whereError(op, p, err)
	}
	return s.allow(ctx, g, op, p, action, where, size)
}

// allowAt is allowIn for a directory open as a file, with the policy's operation given.
func (s *Service) allowAt(ctx context.Context, g Grant, op, p string, action capability.Action, pop policy.Op, dir *os.File, name string) error {
	where, err := s.whereAt(dir, name)
	if err != nil {
		return s.whereError(op, p, err)
	}
	_, err = s.allowAs(ctx, g, op, p, action, pop, where, 0)
	return err
}

// allowFile is allow on the file or directory f is open on.
func (s *Service) allowFile(ctx context.Context, g Grant, op, p string, action capability.Action, f *os.File, size int64) error {
	where, err := s.where(f)
	if err != nil {
		return s.whereError(op, p, err)
	}
	_, err = s.allow(ctx, g, op, p, action, where, size)
	return err
}

// whereError names the operation and the caller's path in an error finding where a file
// is: one of the taxonomy's own, or the file system's.
func (s *Service) whereError(op, p string, err error) error {
	if errdefs.GRPCCode(err) != codes.Unknown {
		return fmt.Errorf("%s %q: %w", op, p, err)
	}
	return s.fsError(op, p, err)
}

// allowNew is allow on rel, which may not exist yet, nor its parents (see whereNew).
func (s *Service) allowNew(ctx context.Context, g Grant, op, p string, action capability.Action, rel string) error {
	where, err := s.whereNew(rel)
	if err != nil {
		return s.whereError(op, p, err)
	}
	_, err = s.allow(ctx, g, op, p, action, where, 0)
	return err
}

// where is the sandbox's path of the file or directory f is open on, as the kernel has it
// now: the workspace's own path, /proc/self/fd of the workspace's descriptor, swapped
// for /workspace. A decision on it is a decision on what was opened, whatever the
// caller's path said and whatever was renamed or swapped for a symlink since.
func (s *Service) where(f *os.File) (string, error) {
	ws, err := fdPath(s.top)
	if err != nil {
		return "", err
	}
	p, err := fdPath(f)
	if err != nil {
		return "", err
	}
	// The kernel marks an open file that has been unlinked; a name that ends so is told
	// apart by its link count.
	if strings.HasSuffix(p, " (deleted)") {
		if fi, err := f.Stat(); err == nil && fi.Sys().(*syscall.Stat_t).Nlink == 0 {
			return "", fmt.Errorf("removed while the request ran: %w", errdefs.ErrNotFound)
		}
	}
	ws = strings.TrimSuffix(ws, "/")
	switch {
	case p == ws || p == "/" && ws == "":
		return wire.WorkspacePath, nil
	case strings.HasPrefix(p, ws+"/"):
		return wire.WorkspacePath + p[len(ws):], nil
	}
	return "", fmt.Errorf("it is no longer in the workspace: %w", errdefs.ErrPermissionDenied)
}

// fdPath reads what /proc/self/fd says f is open on; through SyscallConn, since Fd would
// put f in blocking mode.
func fdPath(f *os.File) (string, error) {
	c, err := f.SyscallConn()
	if err != nil {
		return "", err
	}
	var p string
	var rerr error
	if err := c.Control(func(fd uintptr) { p, rerr = os.Readlink("/proc/self/fd/" + strconv.FormatUint(uint64(fd), 10)) }); err != nil {
		return "", err
	}
	if rerr != nil {
		return "", fmt.Errorf("cannot tell where an open file is, to verify the capability token against it (is /proc mounted?): %v: %w", rerr, errdefs.ErrUnavailable)
	}
	return p, nil
}

// whereIn is the sandbox's path of the entry name of dir: where dir is, and name.
func (s *Service) whereIn(dir *os.Root, name string) (string, error) {
	f, err := dir.Open(".")
	if err != nil {
		return "", err
	}
	defer f.Close()
	return s.whereAt(f, name)
}

// whereAt is whereIn for a directory open as a file.
func (s *Service) whereAt(dir *os.File, name string) (string, error) {
	where, err := s.where(dir)
	if err != nil || name == "." {
		return where, err
	}
	return path.Join(where, name), nil
}

// whereNew is the sandbox's path of rel, which may not exist yet, nor its parents: where
// its deepest existing ancestor is, and the rest of rel below it. A missing component
// that is a symlink (one that leads nowhere) is refused: creating the directories
// through it would put them wherever it points, not where this says.
func (s *Service) whereNew(rel string) (string, error) {
	rest := path.Base(rel)
	for d := path.Dir(rel); ; d = path.Dir(d) {
		f, err := s.root.OpenFile(d, os.O_RDONLY|syscall.O_DIRECTORY, 0)
		if err == nil {
			where, err := s.where(f)
			f.Close()
			return path.Join(where, rest), err
		}
		if !errors.Is(err, fs.ErrNotExist) || d == "." {
			return "", err
		}
		if fi, lerr := s.root.Lstat(d); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return "", fmt.Errorf("%s is a symlink that leads to nothing: with a capability token, parents are not made through one: %w", d, errdefs.ErrFailedPrecondition)
		}
		rest = path.Join(path.Base(d), rest)
	}
}
