package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/sandbox/microvm"
)

// floorMarker is what the floor's init prints once it runs.
const floorMarker = "paddock-bench-floor-init"

// floorInitSource is the floor guest's /init: print the marker on the console, then idle
// (an init that exits panics the kernel).
const floorInitSource = `package main

import (
	"os"
	"syscall"
)

func main() {
	os.Stdout.WriteString("` + floorMarker + `\n")
	for {
		syscall.Pause()
	}
}
`

// vmFloor is a bare QEMU boot of the microVM tier's kernel with a one-program initramfs:
// the floor of a microVM's boot to its first exec.
type vmFloor struct {
	*peer
	qemu   string
	args   []string
	initrd string
}

// newVMFloor builds the floor's init with the Go toolchain that runs the harness, and its
// initramfs, under the environment's directory.
func (e *Env) newVMFloor(ctx context.Context, in microvm.Install, accel microvm.Accel) *vmFloor {
	f := &vmFloor{peer: &peer{name: "bare QEMU"}, qemu: in.QEMU}
	err := func() error {
		dir, err := os.MkdirTemp(e.Dir, "vmfloor-")
		if err != nil {
			return err
		}
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = "/usr/local/go/bin/go"
		}
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module floorinit\n\ngo 1.22\n"), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(floorInitSource), 0o644); err != nil {
			return err
		}
		build := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-o", "init", ".")
		build.Dir, build.Env = dir, append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=")
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("building the floor's init with %s: %v: %s", goBin, err, strings.TrimSpace(string(out)))
		}
		init, err := os.ReadFile(filepath.Join(dir, "init"))
		if err != nil {
			return err
		}
		f.initrd = filepath.Join(dir, "initrd.cpio")
		return microvm.WriteFloorInitramfs(f.initrd, init)
	}()
	f.fail(err)
	args, err := microvm.FloorArgs(in, accel, e.Config.Limits, f.initrd)
	f.fail(err)
	f.args = args
	return f
}

// Boot times QEMU from fork to the marker on its serial console, lets the guest idle for
// idle, reads QEMU's VmRSS, and stops it.
func (f *vmFloor) Boot(ctx context.Context, idle time.Duration) (first time.Duration, rss int64, err error) {
	cmd := exec.CommandContext(ctx, f.qemu, f.args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	// The kernel's console lines come first; the marker is the init's.
	found := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), floorMarker) {
				found <- nil
				_, _ = io.Copy(io.Discard, out) // keep the console drained
				return
			}
		}
		found <- errors.Join(errors.New("QEMU's console ended before the floor's init printed"), sc.Err())
	}()
	select {
	case err := <-found:
		if err != nil {
			return 0, 0, err
		}
	case <-time.After(2 * time.Minute):
		return 0, 0, errors.New("the floor guest printed nothing within 2 minutes")
	}
	first = time.Since(start)
	time.Sleep(idle)
	rss = kB(readFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)), "VmRSS")
	return first, rss, nil
}
