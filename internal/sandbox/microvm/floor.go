package microvm

import (
	"os"
	"strconv"

	"github.com/paddockhq/paddock/internal/wire"
)

// FloorArgs is QEMU's command line for a bare boot of the machine and kernel a sandbox
// with limits l gets (the same accelerator, RAM, vCPUs and kernel command line), with
// initrd's /init as the one program and the serial console on QEMU's stdout: no 9p
// shares, no channel, no QMP, no modules. The benchmarks time it as the floor of a
// microVM's boot.
func FloorArgs(in Install, accel Accel, l wire.Limits, initrd string) ([]string, error) {
	mem, vcpus, err := guestSize(l)
	if err != nil {
		return nil, err
	}
	accelArg, cpu := "tcg,tb-size="+strconv.Itoa(tbSizeMiB), "max"
	if accel == AccelKVM {
		accelArg, cpu = "kvm", "host"
	}
	return []string{
		"-M", "microvm,x-option-roms=off,isa-serial=on,rtc=on,pit=on,pic=on",
		"-accel", accelArg, "-cpu", cpu,
		"-m", strconv.FormatInt(mem>>20, 10) + "M", "-smp", strconv.Itoa(vcpus),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-kernel", in.Kernel, "-initrd", initrd,
		"-append", kernelCmdline(l),
		"-serial", "stdio",
	}, nil
}

// WriteFloorInitramfs writes an initramfs to dst holding init as /init, /dev/console
// (which the kernel opens for init's output) and an empty /proc.
func WriteFloorInitramfs(dst string, init []byte) error {
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	c := newCPIO(f)
	c.dir("dev", 0o755)
	c.entry("dev/console", sIFCHR|0o600, 5, 1, nil)
	c.dir("proc", 0o555)
	c.file("init", 0o755, init)
	if err := c.close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
