package history

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// errnoKinds places the file system's errors in the taxonomy. A full disk is the one a user
// most needs told plainly: the checkpoint failed, and the workspace was not touched.
var errnoKinds = []struct {
	errno syscall.Errno
	kind  error
}{
	{syscall.ENOENT, errdefs.ErrNotFound},
	{syscall.ENOSPC, errdefs.ErrLimitExceeded},
	{syscall.EDQUOT, errdefs.ErrLimitExceeded},
	{syscall.EACCES, errdefs.ErrPermissionDenied},
	{syscall.EPERM, errdefs.ErrPermissionDenied},
	{syscall.EROFS, errdefs.ErrPermissionDenied},
	{syscall.ENOTDIR, errdefs.ErrFailedPrecondition},
	{syscall.ELOOP, errdefs.ErrPermissionDenied},
}

// kindOf wraps err with its taxonomy kind, keeping err's text; errors already in the
// taxonomy pass through.
func kindOf(err error) error {
	for _, k := range errnoKinds {
		if errors.Is(err, k.errno) {
			return fmt.Errorf("%w: %w", err, k.kind)
		}
	}
	return err
}

// storeErr reports a failure of the history store itself (not of the workspace). A full
// store is said plainly, without the host path of the blob that did not fit: the user's
// remedy is to free space on the store's disk (or lower the budget), not to look at a file.
func storeErr(op string, err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("history store is full (no space left on its disk; free some or lower the history budget): %s: %w", op, kindOf(stripPath(err)))
	}
	return fmt.Errorf("history store: %s: %w", op, kindOf(err))
}

// wsErr reports a failure on a workspace path, named relative to the workspace.
func wsErr(op, rel string, err error) error {
	return fmt.Errorf("%s %q: %w", op, rel, kindOf(stripPath(err)))
}

// stripPath drops the host path a *PathError carries, so messages name workspace paths only.
func stripPath(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}
