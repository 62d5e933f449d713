package runner

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// mountImage mounts image at dir through a loop device with direct I/O, so that the
// image's pages are not cached twice, once for each file system (an fsync'd write then
// costs what it does on the host's). The device clears itself when the last mount of it
// goes (autoclear). It is set up with ioctls, not losetup and mount, whose three processes
// would cost more than the rest of the mount; a kernel without LOOP_CONFIGURE (before 5.8)
// gets the commands.
func mountImage(image, dir string) error {
	dev, err := attachLoop(image)
	if errors.Is(err, errNoLoopConfigure) {
		return mountImageCommands(image, dir)
	}
	if err != nil {
		return fmt.Errorf("disk: loop device for %s: %w: %w", image, err, errdefs.ErrUnavailable)
	}
	// Closing the device after the mount leaves the mount its only holder; on a failed
	// mount, the close clears it.
	defer dev.Close()
	if err := unix.Mount(dev.Name(), dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, "discard"); err != nil {
		return fmt.Errorf("disk: mount %s: %w: %w", image, err, errdefs.ErrUnavailable)
	}
	return nil
}

var errNoLoopConfigure = errors.New("the kernel has no LOOP_CONFIGURE")

// loopAttempts bounds the retries when another process takes the free device first.
const loopAttempts = 16

// attachLoop binds image to a free loop device, with direct I/O and autoclear, and
// returns the device open.
func attachLoop(image string) (*os.File, error) {
	backing, err := os.OpenFile(image, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer backing.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer ctl.Close()
	cfg := unix.LoopConfig{Fd: uint32(backing.Fd())}
	cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO
	copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], image)
	for range loopAttempts {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("find a free loop device: %w", err)
		}
		dev, err := os.OpenFile("/dev/loop"+strconv.Itoa(n), os.O_RDWR, 0)
		if err != nil {
			return nil, err
		}
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		switch {
		case err == nil:
			return dev, nil
		case errors.Is(err, unix.EBUSY): // taken between GET_FREE and here
			dev.Close()
			continue
		case errors.Is(err, unix.ENOTTY), errors.Is(err, unix.EINVAL):
			dev.Close()
			return nil, errNoLoopConfigure
		}
		dev.Close()
		return nil, fmt.Errorf("configure %s: %w", dev.Name(), err)
	}
	return nil, fmt.Errorf("every free loop device was taken by another process %d times in a row", loopAttempts)
}

// mountImageCommands is mountImage through losetup and mount.
func mountImageCommands(image, dir string) error {
	out, err := exec.Command("losetup", "--find", "--show", "--direct-io=on", image).CombinedOutput()
	if err != nil {
		return fmt.Errorf("disk: losetup %s: %v: %s: %w", image, err, bytes.TrimSpace(out), errdefs.ErrUnavailable)
	}
	dev := string(bytes.TrimSpace(out))
	out, err = exec.Command("mount", "-t", "ext4", "-o", "nosuid,nodev,noatime,discard", dev, dir).CombinedOutput()
	detach := exec.Command("losetup", "--detach", dev).Run()
	if err != nil {
		return fmt.Errorf("disk: mount %s: %v: %s: %w", image, err, bytes.TrimSpace(out), errdefs.ErrUnavailable)
	}
	if detach != nil {
		return fmt.Errorf("disk: losetup --detach %s: %w", dev, detach)
	}
	return nil
}
