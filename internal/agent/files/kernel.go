package files

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// os.Root, which keeps every operation of this package inside the workspace, walks a path
// one directory at a time with openat(O_NOFOLLOW|O_DIRECTORY) and relies on the kernel to
// refuse a symlink there (ENOTDIR), so that it can resolve the link itself, inside the
// root. A kernel that follows the link instead lets a symlink in the workspace lead the
// walk anywhere the agent can go. gVisor's did, until a fix that paddock's runsc is built
// with (scripts/patches/gvisor, gvisor.dev/issue/14786); a runsc from elsewhere may not
// have it. So the agent asks the kernel once, and on such a kernel its file API refuses
// everything, rather than serve a jail it cannot keep.

// kernelFollowsNoFollow is the answer, asked once per process.
var kernelFollowsNoFollow = sync.OnceValue(func() error { return checkNoFollow(openNoFollowDir) })

// openNoFollowDir is the walk's own open of one component; tests replace it with a kernel
// that follows.
var openNoFollowDir = func(dirfd int, name string) (int, error) {
	return unix.Openat(dirfd, name, unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}

// checkNoFollow makes a private directory with a symlink to itself in it and opens the
// link as os.Root would: nil when the kernel refuses, else why the file API must not run.
// A directory it cannot make (no writable temporary directory) is not held against the
// kernel: the walk is then assumed to be Linux's.
func checkNoFollow(open func(dirfd int, name string) (int, error)) error {
	dir, err := os.MkdirTemp("", "paddock-nofollow-")
	if err != nil {
		return nil
	}
	defer os.RemoveAll(dir)
	if err := os.Symlink(".", filepath.Join(dir, "link")); err != nil {
		return nil
	}
	d, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(d)
	fd, err := open(d, "link")
	if err != nil {
		return nil // refused (ENOTDIR on Linux), as the walk needs
	}
	unix.Close(fd)
	return fmt.Errorf("this sandbox's kernel follows a symlink opened with O_NOFOLLOW|O_DIRECTORY, so the workspace's jail (os.Root) cannot hold; "+
		"the file API is off (a runsc without the fix for gvisor.dev/issue/14786? use the one scripts/setup.sh builds): %w", errdefs.ErrFailedPrecondition)
}
