package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/wire"
)

func tmpOptions(size string) string {
	if _, err := strconv.ParseUint(size, 10, 64); err != nil || size == "0" {
		return "mode=1777"
	}
	return "mode=1777,size=" + size
}

// vmSandboxCgroup is the guest group that holds the agent and its commands.
const vmSandboxCgroup = "/sys/fs/cgroup/sandbox"

// vmPidsLimit puts the agent, and so everything it starts, in a guest cgroup whose pids.max
// is limit (a decimal count; empty: no limit). As in the container tier the agent's own
// threads count too; the host adds a reserve for them to the limit.
func vmPidsLimit(limit string) error {
	if limit == "" {
		return nil
	}
	const root = "/sys/fs/cgroup"
	if err := doMount(mount{"cgroup2", root, "cgroup2", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""}); err != nil {
		return err
	}
	dir := vmSandboxCgroup
	steps := []struct{ path, value string }{
		{filepath.Join(root, "cgroup.subtree_control"), "+pids"},
		{filepath.Join(dir, "pids.max"), limit},
		{filepath.Join(dir, "cgroup.procs"), "0"},
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("guest cgroup: %w", err)
	}
	for _, st := range steps {
		if err := os.WriteFile(st.path, []byte(st.value), 0); err != nil {
			return fmt.Errorf("guest pids limit: %w", err)
		}
	}
	return nil
}

// vmCommandCgroup hands the agent the guest group vmPidsLimit made, as a runc sandbox's
// agent is handed its own on cgroup v2: the agent splits it (commandCgroups), so that the
// commands' group holds them to env.CommandPids with none of the agent's threads in it.
func vmCommandCgroup(env *wire.Envelope) error {
	if env.CommandPids <= 0 || os.Getenv(wire.VMPidsEnv) == "" {
		return nil
	}
	fd, err := unix.Open(vmSandboxCgroup, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return fmt.Errorf("guest cgroup: %w", err)
	}
	env.CommandCgroups = map[string]int{cgroups.Unified: fd}
	return nil
}

// VMInit is the agent as init of a microVM: it mounts the guest's filesystems, loads the
// kernel modules the initramfs carries, opens the channel port, announces itself, reads the
// envelope from the port and serves on it. It returns only on failure; the caller then ends
// PID 1, which panics the guest kernel, which (panic=-1, QEMU -no-reboot) ends the VM.
func VMInit(ctx context.Context, log *slog.Logger) error {
	if err := vmMounts(); err != nil {
		return err
	}
	if err := loadModules(wire.VMModulesDir, log); err != nil {
		return err
	}
	if err := vmShares(); err != nil {
		return err
	}
	if err := vmPidsLimit(os.Getenv(wire.VMPidsEnv)); err != nil {
		return err
	}
	if err := vmLoopback(); err != nil {
		return err
	}
	port, err := openPort(wire.VMPortName, 20*time.Second)
	if err != nil {
		return err
	}
	if _, err := port.Write([]byte(wire.VMHello)); err != nil {
		return fmt.Errorf("channel port: announce: %w", err)
	}
	env, err := wire.ReadEnvelope(port)
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	if env.Tier != wire.TierMicroVM {
		return fmt.Errorf("bootstrap: tier %q in a microVM", env.Tier)
	}
	if err := vmCommandCgroup(env); err != nil {
		return err
	}
	_ = unix.Sethostname([]byte(env.SandboxID))
	// Nothing started from here on may gain privileges by exec: a setuid or file-capability
	// binary (mounts are nosuid as well) would give the sandbox user the guest's root, and
	// with it the agent's channel to the host. The agent needs none by exec: it starts
	// commands as the sandbox user by dropping its own ids, which no_new_privs allows. The
	// flag is each thread's, and a command is forked from whichever thread: it is set on
	// all of them (AllThreadsSyscall; the agent is built without cgo).
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); e != 0 {
		return fmt.Errorf("no_new_privs: %w", e)
	}
	return Run(ctx, env, newOneConnListener(fileConn{port}), nil, log)
}

// vmLoopback brings the guest's loopback up (the kernel then gives it 127.0.0.1 and ::1):
// the sandbox's app, the host's services (PADDOCK_SERVICES_URL) and whatever else a
// sandbox serves to itself live there. The guest has no other network device.
func vmLoopback() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: read flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: bring up: %w", err)
	}
	return nil
}

type mount struct {
	source, target, fstype string
	flags                  uintptr
	data                   string
}

func vmMounts() error {
	const nosuid = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	for _, m := range []mount{
		{"proc", "/proc", "proc", nosuid, ""},
		{"sysfs", "/sys", "sysfs", nosuid, ""},
		{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID | unix.MS_NOEXEC, "mode=0755"},
		{"tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, tmpOptions(os.Getenv(wire.VMTmpEnv))},
	} {
		if err := doMount(m); err != nil {
			return err
		}
	}
	for _, m := range []mount{
		{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "mode=0620,ptmxmode=0666,newinstance"},
		{"tmpfs", "/dev/shm", "tmpfs", nosuid, "mode=1777"},
	} {
		if err := os.MkdirAll(m.target, 0o755); err != nil {
			return err
		}
		if err := doMount(m); err != nil {
			return err
		}
	}
	_ = os.Remove("/dev/ptmx")
	return os.Symlink("pts/ptmx", "/dev/ptmx")
}

// vmShares mounts the host's /usr (read-only, no setuid: nothing in the guest may become
// root through a host binary) and the workspace over virtio-9p.
func vmShares() error {
	const opts = "trans=virtio,version=9p2000.L,msize=262144"
	if err := doMount(mount{wire.VMUsrTag, "/usr", "9p", unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV, opts + ",cache=loose"}); err != nil {
		return err
	}
	return doMount(mount{wire.VMWorkspaceTag, wire.VMWorkspace, "9p", unix.MS_NOSUID | unix.MS_NODEV, opts + ",cache=mmap"})
}

func doMount(m mount) error {
	if err := unix.Mount(m.source, m.target, m.fstype, m.flags, m.data); err != nil {
		return fmt.Errorf("mount %s on %s: %w", m.fstype, m.target, err)
	}
	return nil
}

// loadModules loads the modules listed in dir/order, dependencies first.
func loadModules(dir string, log *slog.Logger) error {
	order, err := os.ReadFile(filepath.Join(dir, "order"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	for _, name := range strings.Fields(string(order)) {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("kernel module %s: %w", name, err)
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		f.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("load kernel module %s: %w", name, err)
		}
	}
	log.Debug("kernel modules loaded", "modules", strings.Fields(string(order)))
	return nil
}

// openPort waits for the virtio-serial port called name (the device shows up asynchronously
// after virtio_console is loaded) and opens it.
func openPort(name string, within time.Duration) (*os.File, error) {
	deadline := time.Now().Add(within)
	for {
		ports, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, p := range ports {
			b, err := os.ReadFile(p)
			if err != nil || strings.TrimSpace(string(b)) != name {
				continue
			}
			dev := "/dev/" + filepath.Base(filepath.Dir(p))
			if f, err := os.OpenFile(dev, os.O_RDWR, 0); err == nil {
				return f, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("virtio-serial port %q did not appear within %s", name, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fileConn is the virtio-serial port as a net.Conn for gRPC.
type fileConn struct{ f *os.File }

type portAddr struct{}

func (portAddr) Network() string { return "virtio-serial" }
func (portAddr) String() string  { return wire.VMPortName }

func (c fileConn) Read(b []byte) (int, error)  { return c.f.Read(b) }
func (c fileConn) Write(b []byte) (int, error) { return c.f.Write(b) }
func (c fileConn) Close() error                { return c.f.Close() }
func (c fileConn) LocalAddr() net.Addr         { return portAddr{} }
func (c fileConn) RemoteAddr() net.Addr        { return portAddr{} }

// Deadlines work when the port is in the runtime's poller (it is: virtio ports poll); if it
// were not, a deadline gRPC sets would simply not apply.
func (c fileConn) SetDeadline(t time.Time) error      { _ = c.f.SetDeadline(t); return nil }
func (c fileConn) SetReadDeadline(t time.Time) error  { _ = c.f.SetReadDeadline(t); return nil }
func (c fileConn) SetWriteDeadline(t time.Time) error { _ = c.f.SetWriteDeadline(t); return nil }
