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

// kernelFollowsNoFollow is the kernel's answer: nil when it refuses as the walk needs, an
// error saying why the file API is off otherwise. An answer is kept for the process's life;
// a check that could not be made (no room in the temporary directory: a sandbox can fill
// its /tmp) refuses the operation at hand and is made again at the next one, so the file
// API never runs on a kernel it has not checked.
func kernelFollowsNoFollow() error {
	noFollow.mu.Lock()
	defer noFollow.mu.Unlock()
	if noFollow.known {
		return noFollow.err
	}
	answered, err := checkNoFollow(openNoFollowDir)
	noFollow.known, noFollow.err = answered, err
	return err
}

var noFollow struct {
	mu    sync.Mutex
	known bool
	err   error
}

// openNoFollowDir is the walk's own open of one component.
func openNoFollowDir(dirfd int, name string) (int, error) {
	return unix.Openat(dirfd, name, unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}

// checkNoFollow makes a private directory with a symlink to itself in it and opens the
// link with open, as os.Root would. answered is false when it could not get that far; err
// then says so, and otherwise says why the file API must not run (nil: the kernel refused).
func checkNoFollow(open func(dirfd int, name string) (int, error)) (answered bool, err error) {
	cannot := func(err error) (bool, error) {
		return false, fmt.Errorf("the file API checks that this sandbox's kernel keeps the workspace's jail before its first operation, and could not: %v: %w",
			err, errdefs.ErrUnavailable)
	}
	dir, err := os.MkdirTemp("", "paddock-nofollow-")
	if err != nil {
		return cannot(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Symlink(".", filepath.Join(dir, "link")); err != nil {
		return cannot(err)
	}
	d, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return cannot(err)
	}
	defer unix.Close(d)
	fd, err := open(d, "link")
	if err != nil {
		return true, nil // refused (ENOTDIR on Linux), as the walk needs
	}
	unix.Close(fd)
	return true, fmt.Errorf("this sandbox's kernel follows a symlink opened with O_NOFOLLOW|O_DIRECTORY, so the workspace's jail (os.Root) cannot hold; "+
		"the file API is off (a runsc without the fix for gvisor.dev/issue/14786? use the one scripts/setup.sh builds): %w", errdefs.ErrFailedPrecondition)
}
