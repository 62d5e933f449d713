// Package xfs makes a file system with reflinks where the host's has none: an XFS in a
// sparse file, loop-mounted. The bench and the tests of what differs on such a host (a
// fork's clones, the errors XFS gives) use it.
package xfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
)

// ErrMissing is Mount's error where mkfs.xfs (Debian's xfsprogs, which scripts/setup.sh
// installs) is not installed.
var ErrMissing = errors.New("mkfs.xfs (Debian's xfsprogs, which scripts/setup.sh installs) is not installed")

// Mount makes image, a sparse file of size, an XFS with reflinks (mkfs.xfs -m reflink=1)
// and mounts it at dir, which it makes, through a loop device that goes with the mount.
// It needs root.
func Mount(ctx context.Context, image, dir string, size int64) error {
	mkfs, err := exec.LookPath("mkfs.xfs")
	if err != nil {
		return ErrMissing
	}
	if err := os.WriteFile(image, nil, 0o600); err != nil {
		return err
	}
	if err := os.Truncate(image, size); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, mkfs, "-q", "-m", "reflink=1", image).CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.xfs: %v: %s", err, out)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "mount", "-o", "loop", image, dir).CombinedOutput(); err != nil {
		return fmt.Errorf("mount the XFS: %v: %s", err, out)
	}
	return nil
}
