package runner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/wire"
)

// A fork's disk. A fork of a persistent container sandbox with a disk image starts from
// a copy of that image (Spec.DiskFrom), made sparsely in the kernel: only the extents that
// hold data are copied (copySparse), as a reflink where the host's file system has them.
// It costs one file's bytes, not one write per file of the workspace. The fork's Seed then
// restores the checkpoint asked for over the copy (history.ForkOverCopy), rewriting only
// what differs, and the copy's /tmp is emptied as at every start.
//
// The image is copied while its file system is frozen (FIFREEZE), running or not: a
// mounted image may hold writes not yet on the image file, and a file system's own
// background writes (its journal's checkpoints) would tear a copy made meanwhile. A
// frozen file system has flushed everything and is clean; its writers wait until it is
// thawed. An image not mounted (after a reboot) is copied as it is. If the process dies
// while an image is frozen, the next mount or adoption of that sandbox thaws it (thaw).

// copyDisk copies sandbox image src, whose mount point (when mounted) is mount, into out,
// a file of src's size; durable makes the copy reach the disk before it is used. Two forks
// of one image take turns (a lock on it): a file system frozen twice refuses the second.
// prove, when set, runs while the mounted image is frozen, beside the copy, on the
// source's workspace; its answer is copyDisk's first result (false when not mounted).
func copyDisk(src, mount string, out *os.File, durable bool, prove func(workspace string) bool) (bool, error) {
	proven, err := copyDiskProving(src, mount, out, prove)
	if err != nil {
		return false, err
	}
	if durable {
		if err := out.Sync(); err != nil {
			return false, fmt.Errorf("disk: sync the copy: %w", err)
		}
	}
	return proven, nil
}

func copyDiskProving(src, mount string, out *os.File, prove func(workspace string) bool) (bool, error) {
	in, err := os.Open(src)
	if err != nil {
		return false, fmt.Errorf("disk: the source's image: %w", err)
	}
	defer in.Close()
	if err := unix.Flock(int(in.Fd()), unix.LOCK_EX); err != nil {
		return false, fmt.Errorf("disk: lock the source's image: %w", err)
	}
	if !isMountPoint(mount) {
		return false, copyFrozen(in, out)
	}
	thaw, err := freeze(mount)
	if err != nil {
		return false, err
	}
	// The proof reads the frozen source (its inodes cached) while the copy is made.
	proof := make(chan bool, 1)
	if prove != nil {
		go func() { proof <- prove((&disk{mount: mount}).workspace()) }()
	} else {
		proof <- false
	}
	err = copyFrozen(in, out)
	proven := <-proof
	// The source's writers wait no longer than the copy and the proof: the copy is
	// synced after.
	thaw()
	return proven && err == nil, err
}

// copyFrozen copies in (its file system frozen or not mounted) into out, sparsely.
func copyFrozen(in, out *os.File) error {
	// Its size now, under the freeze: a start may have grown it meanwhile.
	fi, err := in.Stat()
	if err != nil {
		return fmt.Errorf("disk: the source's image: %w", err)
	}
	if err := out.Truncate(fi.Size()); err != nil {
		return fmt.Errorf("disk: %w", err)
	}
	if err := copyExtents(in, out, fi.Size(), false); err != nil {
		return fmt.Errorf("disk: copy the source's image: %w", err)
	}
	return nil
}

// The file system freeze ioctls, _IOWR('X', 119, int) and _IOWR('X', 120, int), which
// x/sys/unix does not name.
const (
	fiFreeze = 0xc0045877
	fiThaw   = 0xc0045878
)

// freeze freezes the file system mounted at mount (FIFREEZE, which flushes it first) and
// returns what thaws it.
func freeze(mount string) (func(), error) {
	f, err := os.Open(mount)
	if err != nil {
		return nil, fmt.Errorf("disk: freeze %s: %w", mount, err)
	}
	if err := unix.IoctlSetInt(int(f.Fd()), fiFreeze, 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("disk: freeze %s: %w", mount, err)
	}
	return func() {
		_ = unix.IoctlSetInt(int(f.Fd()), fiThaw, 0)
		f.Close()
	}, nil
}

// thaw thaws the file system mounted at mount, if it is frozen: one a fork froze and did
// not thaw, its process having died meanwhile. A file system not frozen is left as it is.
func thaw(mount string) error {
	if !isMountPoint(mount) {
		return nil
	}
	f, err := os.Open(mount)
	if err != nil {
		return fmt.Errorf("disk: thaw %s: %w", mount, err)
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), fiThaw, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("disk: thaw %s: %w", mount, err)
	}
	return nil
}

// forkDisk makes the image of sandbox id a copy of sandbox from's (both user's), within
// the reserve, and says whether it did: not when from has no image (its workspace
// predates disk images, or it has no disk limit) or id has one already. The copy is made
// outside the disks' lock: once the empty file of its size exists, the reserve counts it.
// prove runs while the source is frozen (see copyDisk); its answer is the second result.
func (r *Runner) forkDisk(user, from, id string, extra wire.Size, prove func(string) bool) (copied, proven bool, err error) {
	src, dst := r.diskImage(user, from), r.diskImage(user, id)
	fi, err := os.Stat(src)
	if err != nil {
		return false, false, nil
	}
	if _, err := os.Stat(dst); err == nil {
		return false, false, nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return false, false, fmt.Errorf("disk: %w", err)
	}
	out, err := r.reserveImage(dst, wire.Size(fi.Size()), extra)
	if err != nil {
		return false, false, err
	}
	mount := filepath.Join(r.cfg.WorkspaceRoot, user, "sandboxes", from)
	proven, err = copyDisk(src, mount, out, true, prove)
	if err = errors.Join(err, out.Close()); err != nil {
		os.Remove(dst)
		return false, false, err
	}
	return true, proven, nil
}

// reserveImage makes path, an empty file of size, if the reserve has room for it and
// extra, under the disks' lock.
func (r *Runner) reserveImage(path string, size, extra wire.Size) (*os.File, error) {
	unlock, err := lockFile(filepath.Join(r.cfg.WorkspaceRoot, ".disks.lock"))
	if err != nil {
		return nil, fmt.Errorf("disk: %w", err)
	}
	defer unlock()
	if err := r.checkReserve(size + extra); err != nil {
		return nil, err
	}
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("disk: %w", err)
	}
	if err := out.Truncate(int64(size)); err != nil {
		out.Close()
		os.Remove(path)
		return nil, fmt.Errorf("disk: %w", err)
	}
	return out, nil
}

// CopyImage copies disk image src (mounted at mount, or not mounted) into a new file dst
// as a fork does: frozen while copied, sparsely, synced, with prove (when set) run on
// the frozen source's workspace meanwhile. For the benchmarks.
func CopyImage(src, mount, dst string, prove func(workspace string) bool) (bool, error) {
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return false, fmt.Errorf("disk: %w", err)
	}
	proven, err := copyDisk(src, mount, out, true, prove)
	return proven, errors.Join(err, out.Close())
}

// FormatImage makes an empty sparse ext4 image of size at path, as a sandbox's disk is
// made, and MountImage mounts one at dir as a sandbox's is mounted. For the benchmarks.
func FormatImage(path string, size wire.Size) error { return formatImage(path, size) }

// MountImage: see FormatImage.
func MountImage(image, dir string) error { return mountImage(image, dir) }
