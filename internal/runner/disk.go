package runner

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire"
)

// Disk quotas. A sandbox with a disk limit (Limits.Disk) gets a file system of its own: a
// sparse ext4 image of that size, loop-mounted (direct I/O; nosuid, nodev, discard) where
// its workspace directory would be. It holds workspace/, bound at /workspace, and tmp/,
// bound at /tmp (emptied at every start). The kernel fills it no further: a write past it
// fails with ENOSPC inside the sandbox, and the host's disk grows by at most the image's
// size; what the sandbox deletes is given back to the host (discard punches holes in the
// image).
//
// Images are <workspace_root>/<user>/disks/<id>.img, in a directory only root enters. A
// persistent sandbox's image stays, mounted, with its workspace until RemoveWorkspace (a
// reboot unmounts it; its next start mounts it again); a one-shot sandbox's goes with it
// at Destroy. A workspace given with --workspace is the user's own directory and is not
// counted; the sandbox's /tmp is, on an image of its own.
//
// The reserve: an image is sparse, so the space it may still take is promised, not taken.
// A sandbox is refused when its disk, with every image already made filled to its size,
// would leave less than Config.DiskReserve free on the file system: what the control plane
// writes there (paddock.db, logs) always has that room. A persistent sandbox's history
// store, beside its image, is promised its whole budget (wire.HistoryBudget) too.

// disk is a sandbox's mounted image.
type disk struct {
	image, mount string
	size         wire.Size
	// remove: the image goes with the sandbox (a one-shot sandbox's).
	remove bool
	// ready is closed once a disk opened in the background (openDiskAsync) is mounted,
	// or failed to be (err); nil for a disk opened in the foreground.
	ready chan struct{}
	err   error
}

func (d *disk) workspace() string { return filepath.Join(d.mount, "workspace") }
func (d *disk) tmp() string       { return filepath.Join(d.mount, "tmp") }

// diskImage is the path of sandbox id's image.
func (r *Runner) diskImage(user, id string) string {
	return filepath.Join(r.cfg.WorkspaceRoot, user, "disks", id+".img")
}

// openDisk makes (or, for a persistent sandbox, finds again) the image of sandbox id and
// mounts it at mount, with workspace/ owned by uid:gid and an empty tmp/. The image's root
// is 0700, root's, so that no host user enters it, for a container, whose runtime opens
// what it binds as root; for the other tiers, whose sandbox user or QEMU reaches the
// workspace as itself on the host, it is 0711 and has no tmp/.
func (r *Runner) openDisk(user, id, mount string, size wire.Size, remove bool, tier wire.Tier, uid, gid uint32) (*disk, error) {
	d := &disk{image: r.diskImage(user, id), mount: mount, size: size, remove: remove}
	if err := r.makeDisk(d, tier, uid, gid); err != nil {
		return nil, err
	}
	return d, nil
}

// openDiskAsync is openDisk for a one-shot sandbox's image, made and mounted in the
// background: it returns at once, with the disk's paths known, so that the caller writes
// the sandbox's bundle meanwhile. d.wait says when it is mounted, or why it is not; a disk
// that failed has cleaned up after itself.
func (r *Runner) openDiskAsync(user, id, mount string, size wire.Size, tier wire.Tier, uid, gid uint32) *disk {
	d := &disk{image: r.diskImage(user, id), mount: mount, size: size, remove: true, ready: make(chan struct{})}
	go func() {
		defer close(d.ready)
		d.err = r.makeDisk(d, tier, uid, gid)
	}()
	return d
}

// makeDisk makes d's image unless there is one, and mounts and prepares it; what a failed
// mount leaves is removed with a one-shot sandbox's image.
func (r *Runner) makeDisk(d *disk, tier wire.Tier, uid, gid uint32) error {
	if err := os.MkdirAll(filepath.Dir(d.image), 0o700); err != nil {
		return fmt.Errorf("disk: %w", err)
	}
	if err := r.makeImage(d.image, d.size, historyOf(d.remove), !d.remove); err != nil {
		return err
	}
	if err := r.mountDisk(d, tier, uid, gid); err != nil {
		if d.remove { // a one-shot sandbox's image goes; a persistent one's stays
			_ = d.release()
		}
		return err
	}
	return nil
}

// wait returns once d is mounted, with the error that kept it from being; at once for a
// disk opened in the foreground, or none.
func (d *disk) wait() error {
	if d == nil || d.ready == nil {
		return nil
	}
	<-d.ready
	return d.err
}

// mountDisk grows d's image if it must, mounts it unless it is, and prepares it.
func (r *Runner) mountDisk(d *disk, tier wire.Tier, uid, gid uint32) error {
	if err := os.Mkdir(d.mount, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("disk: %w", err)
	}
	if err := r.growImage(d); err != nil {
		return err
	}
	if !isMountPoint(d.mount) {
		if err := mountImage(d.image, d.mount); err != nil {
			return err
		}
	} else if err := thaw(d.mount); err != nil {
		return err
	}
	return d.prepare(tier, uid, gid)
}

// prepare makes the image's two directories: workspace/ (kept; owned by uid:gid when new)
// and, for a container, tmp/ (a fresh one at every start).
func (d *disk) prepare(tier wire.Tier, uid, gid uint32) error {
	mode := fs.FileMode(0o711)
	if tier == wire.TierContainer {
		mode = 0o700
	}
	if err := os.Chmod(d.mount, mode); err != nil {
		return fmt.Errorf("disk: %w", err)
	}
	ws := d.workspace()
	if err := os.Mkdir(ws, 0o700); err == nil {
		if err := os.Chown(ws, int(uid), int(gid)); err != nil {
			return fmt.Errorf("disk: %w", err)
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("disk: %w", err)
	}
	if err := os.RemoveAll(d.tmp()); err != nil {
		return fmt.Errorf("disk: clear tmp: %w", err)
	}
	if tier != wire.TierContainer {
		return nil
	}
	if err := os.Mkdir(d.tmp(), 0o1777); err != nil {
		return fmt.Errorf("disk: %w", err)
	}
	// Mkdir's mode is cut by the umask, which the sticky, world-writable bits do not survive.
	return os.Chmod(d.tmp(), 0o777|fs.ModeSticky)
}

// historyOf is what a sandbox's history store may take beside its image: its budget for a
// persistent sandbox's (only those keep history), none for a one-shot sandbox's.
func historyOf(oneShot bool) wire.Size {
	if oneShot {
		return 0
	}
	return wire.HistoryBudget
}

// makeImage makes a sparse ext4 image of size at path, unless there is one. Making one is
// the moment the reserve is checked, under a lock, so that two sandboxes starting at once
// never both take the last of it; extra is what else the sandbox may take beside it. The
// image is a copy of a template of that size (formatted once, see diskTemplate): copying
// the few MB mkfs.ext4 writes costs less than running it, which fsyncs them in turn.
// durable makes the copy reach the disk before the image is used, and gives it a journal:
// a persistent image must survive a crash. A one-shot one is removed with its sandbox, so
// it has no journal, whose loading is most of what mounting an ext4 costs. Copies share
// the template's UUID, which nothing here reads: an image is mounted by its loop device.
func (r *Runner) makeImage(path string, size, extra wire.Size, durable bool) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	unlock, err := lockFile(filepath.Join(r.cfg.WorkspaceRoot, ".disks.lock"))
	if err != nil {
		return fmt.Errorf("disk: %w", err)
	}
	defer unlock()
	if err := r.checkReserve(size + extra); err != nil {
		return err
	}
	tmpl, err := r.diskTemplate(size, durable)
	if err != nil {
		return err
	}
	if err := copySparse(tmpl, path, durable); err != nil {
		os.Remove(path)
		return fmt.Errorf("disk: copy the empty file system: %w", err)
	}
	return nil
}

// diskTemplate is the path of an empty ext4 image of size, with a journal or without,
// made on first use, under the workspace root in a directory only root enters. The caller
// holds the disks' lock.
func (r *Runner) diskTemplate(size wire.Size, journal bool) (string, error) {
	dir := filepath.Join(r.cfg.WorkspaceRoot, ".disk-templates")
	// 4k: of 4 KiB blocks at every size; a template of an older paddock may have smaller.
	name := fmt.Sprintf("ext4-4k-%d.img", int64(size))
	if !journal {
		name = fmt.Sprintf("ext4-4k-nojournal-%d.img", int64(size))
	}
	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("disk: %w", err)
	}
	tmp := path + ".new"
	if err := formatImageWith(tmp, size, journal); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("disk: %w", err)
	}
	return path, nil
}

// formatImage makes a sparse file of size at path and an empty ext4 in it.
func formatImage(path string, size wire.Size) error { return formatImageWith(path, size, true) }

// formatImageWith is formatImage, with a journal or without.
func formatImageWith(path string, size wire.Size, journal bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("disk: %w", err)
	}
	err = f.Truncate(int64(size))
	if err = errors.Join(err, f.Close()); err != nil {
		os.Remove(path)
		return fmt.Errorf("disk: %w", err)
	}
	// -m 0: no blocks kept for root, who inside is the agent. -b 4096 at every size (mkfs
	// picks 1 KiB blocks under 512 MiB): a loop device over a file with shared extents (a
	// reflinked copy, on XFS) takes the file system's 4 KiB as its logical block size, and
	// ext4 mounts no smaller block on it. Lazy init: the inode tables and journal are
	// zeroed by the kernel later, not written now. nodiscard: a fresh sparse file has
	// nothing to discard.
	args := []string{"-q", "-F", "-m", "0", "-b", "4096", "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard"}
	if !journal {
		args = append(args, "-O", "^has_journal")
	}
	out, err := exec.Command("mkfs.ext4", append(args, path)...).CombinedOutput()
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("disk: mkfs.ext4 (install e2fsprogs): %v: %s: %w", err, bytes.TrimSpace(out), errdefs.ErrUnavailable)
	}
	return nil
}

// copySparse copies src to a new file dst, its holes left holes: only the extents that
// hold data are copied (SEEK_DATA, SEEK_HOLE), in the kernel (copy_file_range).
func copySparse(src, dst string, durable bool) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, out.Close()) }()
	if err := out.Truncate(fi.Size()); err != nil {
		return err
	}
	return copyExtents(in, out, fi.Size(), durable)
}

// copyExtents copies the first size bytes of in into out (as long already), its holes left
// holes. Where in and out share a file system with reflinks, copy_file_range clones.
func copyExtents(in, out *os.File, size int64, durable bool) error {
	inFd, outFd := int(in.Fd()), int(out.Fd())
	for off := int64(0); off < size; {
		data, err := unix.Seek(inFd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) { // no data past off
			break
		}
		if err != nil {
			return err
		}
		hole, err := unix.Seek(inFd, data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		for pos := data; pos < hole; {
			rOff, wOff := pos, pos
			n, err := unix.CopyFileRange(inFd, &rOff, outFd, &wOff, int(hole-pos), 0)
			if err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("%s ended early", in.Name())
			}
			pos += int64(n)
		}
		off = hole
	}
	if durable {
		return out.Sync()
	}
	return nil
}

// growImage grows an image that is smaller than its sandbox's limit (a persistent
// sandbox whose limit was raised), within the reserve. It is done offline: the sandbox is
// not running yet, and growing a mounted ext4 needs CAP_SYS_RESOURCE, which some hosts
// withhold. A smaller limit does not shrink an image: d.size stays what the image holds.
func (r *Runner) growImage(d *disk) error {
	fi, err := os.Stat(d.image)
	if err != nil {
		return fmt.Errorf("disk: %w", err)
	}
	if wire.Size(fi.Size()) >= d.size {
		d.size = wire.Size(fi.Size())
		return nil
	}
	unlock, err := lockFile(filepath.Join(r.cfg.WorkspaceRoot, ".disks.lock"))
	if err != nil {
		return fmt.Errorf("disk: %w", err)
	}
	defer unlock()
	if err := r.checkReserve(d.size - wire.Size(fi.Size())); err != nil {
		return err
	}
	// Not a lazy unmount: a file system still in use (busy) must not be mounted twice.
	if isMountPoint(d.mount) {
		if err := unix.Unmount(d.mount, 0); err != nil {
			r.log.Warn("the sandbox's disk is in use and keeps its size until it is not", "disk", d.image, "size", wire.Size(fi.Size()), "limit", d.size, "err", err)
			d.size = wire.Size(fi.Size())
			return nil
		}
	}
	if err := os.Truncate(d.image, int64(d.size)); err != nil {
		return fmt.Errorf("disk: %w", err)
	}
	// e2fsck's exit status 1 is "errors corrected", which resize2fs needs done.
	if out, err := exec.Command("e2fsck", "-f", "-p", d.image).CombinedOutput(); err != nil && exitCode(err) != 1 {
		return fmt.Errorf("disk: grow to %s: e2fsck: %v: %s: %w", d.size, err, bytes.TrimSpace(out), errdefs.ErrUnavailable)
	}
	if out, err := exec.Command("resize2fs", d.image).CombinedOutput(); err != nil {
		return fmt.Errorf("disk: grow to %s: resize2fs: %v: %s: %w", d.size, err, bytes.TrimSpace(out), errdefs.ErrUnavailable)
	}
	return nil
}

func exitCode(err error) int {
	var x *exec.ExitError
	if errors.As(err, &x) {
		return x.ExitCode()
	}
	return -1
}

// checkReserve refuses a new image of size when, with every image under the workspace root
// grown to its size, less than the reserve would be left free.
func (r *Runner) checkReserve(size wire.Size) error {
	var st unix.Statfs_t
	if err := unix.Statfs(r.cfg.WorkspaceRoot, &st); err != nil {
		return fmt.Errorf("disk: %w", err)
	}
	free := int64(st.Bavail) * st.Bsize
	reserve := int64(r.cfg.DiskReserve)
	if reserve == 0 {
		reserve = max(1<<30, int64(st.Blocks)*st.Bsize/20)
	}
	promised := promisedBytes(r.cfg.WorkspaceRoot)
	if free-promised-int64(size) < reserve {
		return fmt.Errorf("disk: a %s disk would leave less than the %s reserved for the control plane free (%s free, %s of it promised to other sandboxes' disks); ask for a smaller disk, or remove sandboxes: %w",
			size, wire.Size(reserve), wire.Size(free), wire.Size(promised), errdefs.ErrLimitExceeded)
	}
	return nil
}

// promisedBytes is what the sandboxes under root may still take of the host's disk: each
// image's size less what it already holds, and a persistent sandbox's history budget (a
// store that holds some of it is counted whole: the reserve errs on the safe side).
func promisedBytes(root string) int64 {
	imgs, _ := filepath.Glob(filepath.Join(root, "*", "disks", "*.img"))
	var n int64
	for _, img := range imgs {
		var st syscall.Stat_t
		if syscall.Stat(img, &st) == nil {
			n += max(0, st.Size-st.Blocks*512)
		}
		id := strings.TrimSuffix(filepath.Base(img), ".img")
		if _, err := os.Stat(filepath.Join(filepath.Dir(filepath.Dir(img)), "history", id)); err == nil {
			n += int64(wire.HistoryBudget)
		}
	}
	return n
}

// close unmounts and removes the image of a one-shot sandbox, with its mount point. A
// persistent sandbox's stays mounted, as its workspace directory would stay, until
// RemoveWorkspace. The unmount is lazy: a process of the sandbox still dying lets go later.
// A disk still being mounted in the background is waited for first.
func (d *disk) close() error {
	if d == nil || !d.remove {
		return nil
	}
	if d.wait() != nil {
		return nil // it failed, and cleaned up after itself
	}
	return d.release()
}

// release unmounts and removes a one-shot sandbox's image and its mount point.
func (d *disk) release() error {
	if err := unmount(d.mount); err != nil {
		return err
	}
	return errors.Join(os.Remove(d.mount), os.Remove(d.image))
}

// UnmountAll detaches every file system mounted below dir, deepest first. Persistent
// sandboxes' disk images stay mounted while their workspaces exist; a caller removing a
// whole data directory (a test's, a benchmark's) calls this first, or the images stay
// held by their loop devices after the files are gone.
func UnmountAll(dir string) error {
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("disk: read mounts: %w", err)
	}
	var points []string
	for _, line := range strings.Split(string(info), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	var errs []error
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("disk: unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// unmount detaches whatever is mounted at dir, if anything.
func unmount(dir string) error {
	for isMountPoint(dir) {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("disk: unmount %s: %w", dir, err)
		}
	}
	return nil
}

// isMountPoint reports whether dir is the root of a mount: another device than its parent's.
func isMountPoint(dir string) bool {
	var st, parent syscall.Stat_t
	if syscall.Lstat(dir, &st) != nil || syscall.Lstat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// full reports whether the sandbox's disk is full, or nearly: what it has left is below a
// 256th of its size (at least 1MiB), so that a write of any size was likely refused. False
// for a sandbox without a disk.
func (d *disk) full() bool {
	if d == nil {
		return false
	}
	var st unix.Statfs_t
	if unix.Statfs(d.mount, &st) != nil {
		return false
	}
	return int64(st.Bavail)*st.Bsize < max(1<<20, int64(d.size)/256)
}

// lockFile takes an exclusive lock on path (made if missing) until the returned func.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}
