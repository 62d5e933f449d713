package container

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// A bundle is some fifty small files and directories written at every start and removed
// at every end. Where the state directory is not on tmpfs (a host whose /run is a plain
// directory), the bundle gets a tmpfs of its own: on a disk file system that metadata
// work costs several times the rest of writing the bundle, and none of it needs to
// outlive the host's boot, as a state directory's contents need not.
const bundleFSOptions = "mode=0711,size=16m,nr_inodes=4096"

// mountBundleFS mounts a tmpfs at dir (made if missing) unless dir's parent is on tmpfs
// already or dir is a mount point.
func mountBundleFS(dir string) error {
	var fs unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(dir), &fs); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	if fs.Type == unix.TMPFS_MAGIC {
		return nil
	}
	if err := os.Mkdir(dir, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("bundle: %w", err)
	}
	if mounted(dir) {
		return nil
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, bundleFSOptions); err != nil {
		return fmt.Errorf("bundle: mount a tmpfs at %s: %w", dir, err)
	}
	return nil
}

// RemoveState removes a sandbox's state directory, unmounting its bundle's tmpfs first.
func RemoveState(dir string) error {
	bundle := filepath.Join(dir, "bundle")
	for mounted(bundle) {
		if err := unix.Unmount(bundle, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("bundle: unmount %s: %w", bundle, err)
		}
	}
	return os.RemoveAll(dir)
}

// mounted reports whether dir is the root of a mount: another device than its parent's.
func mounted(dir string) bool {
	var st, parent unix.Stat_t
	if unix.Lstat(dir, &st) != nil || unix.Lstat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}
