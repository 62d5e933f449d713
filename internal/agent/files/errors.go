package files

import (
	"errors"
	"fmt"
	"syscall"

	"google.golang.org/grpc/codes"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// errnoKinds places the errors the file system gives us in the taxonomy, with a hint where
// the bare taxonomy word would not tell the caller what to do.
var errnoKinds = []struct {
	errno syscall.Errno
	kind  error
	hint  string
}{
	{syscall.ENOENT, errdefs.ErrNotFound, ""},
	{syscall.EEXIST, errdefs.ErrAlreadyExists, ""},
	{syscall.ENOTEMPTY, errdefs.ErrFailedPrecondition, "directory not empty"},
	{syscall.ENOTDIR, errdefs.ErrFailedPrecondition, "a path component is not a directory"},
	{syscall.EISDIR, errdefs.ErrInvalidArgument, "is a directory"},
	{syscall.ELOOP, errdefs.ErrInvalidArgument, "too many levels of symlinks"},
	{syscall.ENAMETOOLONG, errdefs.ErrInvalidArgument, "name too long"},
	{syscall.EINVAL, errdefs.ErrInvalidArgument, ""},
	{syscall.EACCES, errdefs.ErrPermissionDenied, ""},
	{syscall.EPERM, errdefs.ErrPermissionDenied, ""},
	{syscall.EROFS, errdefs.ErrPermissionDenied, "read-only file system"},
	{syscall.ENOSPC, errdefs.ErrLimitExceeded, "no space left on device"},
	{syscall.EDQUOT, errdefs.ErrLimitExceeded, "disk quota exceeded"},
	{syscall.EXDEV, errdefs.ErrFailedPrecondition, "crosses a mount point"},
	{syscall.EBUSY, errdefs.ErrFailedPrecondition, "busy"},
}

// os.Root reports these conditions with unexported errors; their text is all we can match.
// The escape tests fail if the standard library ever changes it.
const (
	escapeText = "path escapes from parent"
	notDirText = "not a directory"
)

// fsError turns an error from os.Root into one of the taxonomy, naming the operation and
// the caller's path p. Errors already in the taxonomy pass through, and nil stays nil.
func (s *Service) fsError(op, p string, err error) error {
	if err == nil || errdefs.GRPCCode(err) != codes.Unknown {
		return err
	}
	hint, kind := classify(err)
	if kind == nil {
		s.log.Warn("unexpected file system error", "op", op, "path", p, "err", err)
		return fmt.Errorf("%s %q: %v", op, p, innermost(err))
	}
	if hint != "" {
		return fmt.Errorf("%s %q: %s: %w", op, p, hint, kind)
	}
	return fmt.Errorf("%s %q: %w", op, p, kind)
}

// classify finds err's place in the taxonomy, or nil.
func classify(err error) (hint string, kind error) {
	switch innermost(err).Error() {
	case escapeText:
		return "a symlink leads outside the workspace", errdefs.ErrPermissionDenied
	case notDirText:
		return "not a directory", errdefs.ErrFailedPrecondition
	}
	for _, e := range errnoKinds {
		if errors.Is(err, e.errno) {
			return e.hint, e.kind
		}
	}
	return "", nil
}

// innermost unwraps err to its root cause, dropping the op and path os.Root put around it.
func innermost(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}
