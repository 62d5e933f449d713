// Package microvm is the microVM tier: each sandbox is a QEMU `-M microvm` guest with its
// own kernel, and paddock-agent is the guest's init.
//
// What runs where. On the host: one QEMU process per sandbox, started unprivileged (the
// sandbox user's uid and gid, so that workspace files it writes belong to that user and a
// process that escaped the guest holds no more than the process tier would), in new
// network, IPC and UTS namespaces, under QEMU's own seccomp filter (-sandbox), in the
// sandbox's cgroup (memory: guest RAM plus QEMU's overhead; CPU quota). In the guest: a
// Debian kernel (see scripts/setup.sh), an initramfs that paddock writes per sandbox
// (paddock-agent as /init, the virtio and 9p modules, a minimal /etc, /bin and /lib as
// links into /usr), the host's /usr shared read-only and the workspace read-write over
// virtio-9p. The agent's channel is a virtio-serial port whose host end is a Unix socket in
// the sandbox's directory; the host connects to it before the guest runs, so nothing else
// can, and speaks the bootstrap envelope and then gRPC over that one connection.
//
// Threat model: everything in the guest is hostile, the guest kernel included once a
// command has broken it. The guest gets no network device at all (QEMU's user-mode
// networking, with Debian 12's old libslirp, is a known escape path and is never used),
// only the devices listed above, and the host's /usr read-only. What the guest can reach
// on the host is QEMU's device emulation (virtio-mmio, virtio-serial, 9p), which is the
// attack surface this tier adds; QEMU runs with the confinement listed above so that an
// escape lands in an unprivileged, network-less process in a cgroup. Under TCG (here:
// /dev/kvm exists but nested guests hang) the guest's CPU is emulated, which is slow but
// removes KVM from the surface. KVM is used only where DetectAccel's trial guest booted
// under it (QEMU then also gets /dev/kvm's group, and nothing else).
package microvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/sandbox"
	"github.com/paddockhq/paddock/internal/spawn"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// Defaults and bounds of a guest.
const (
	// DefaultMemory is the guest's RAM when the sandbox has no memory limit.
	DefaultMemory = 512 << 20
	// MinMemory is the least RAM the guest kernel and its initramfs boot in.
	MinMemory = 128 << 20
	// qemuOverhead is what the QEMU process needs beyond guest RAM (its own heap, the TCG
	// translation cache, capped at tbSizeMiB); the cgroup's memory limit adds it.
	qemuOverhead = 256 << 20
	tbSizeMiB    = 64
	// DefaultBootTimeout is how long a guest has to boot and announce its agent.
	DefaultBootTimeout = 90 * time.Second
)

// Install is where the microVM tier's pieces are on this host.
type Install struct {
	QEMU    string // qemu-system-x86_64
	Kernel  string // the guest's kernel: vmlinux (ELF, booted through PVH) or vmlinuz
	Version string // the guest kernel's release, as uname -r says it
	Modules string // the guest kernel's lib/modules/<version>
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Size() > 0
}

// Locate finds QEMU on PATH and the newest guest kernel under guestDir (where
// scripts/setup.sh unpacks it), and says what to install when either is missing.
func Locate(guestDir string) (Install, error) {
	var in Install
	var err error
	if in.QEMU, err = exec.LookPath("qemu-system-x86_64"); err != nil {
		return in, fmt.Errorf("the microvm tier needs QEMU: qemu-system-x86_64 is not on PATH (install Debian's qemu-system-x86, or run scripts/setup.sh): %w", errdefs.ErrUnavailable)
	}
	kernels, _ := filepath.Glob(filepath.Join(guestDir, "boot", "vmlinuz-*"))
	if len(kernels) == 0 {
		return in, fmt.Errorf("the microvm tier needs a guest kernel: none in %s/boot (run scripts/setup.sh, which unpacks Debian's linux-image-amd64 there): %w", guestDir, errdefs.ErrUnavailable)
	}
	in.Kernel = kernels[len(kernels)-1]
	in.Version = strings.TrimPrefix(filepath.Base(in.Kernel), "vmlinuz-")
	// The uncompressed kernel, where setup.sh made one, boots sooner under TCG
	// (the bzImage decompresses itself with emulated instructions).
	if vmlinux := filepath.Join(guestDir, "boot", "vmlinux-"+in.Version); isFile(vmlinux) {
		in.Kernel = vmlinux
	}
	in.Modules = filepath.Join(guestDir, "lib", "modules", in.Version)
	if _, err := os.Stat(in.Modules); err != nil {
		return in, fmt.Errorf("the microvm tier needs the guest kernel's modules: %s is missing (run scripts/setup.sh): %w", in.Modules, errdefs.ErrUnavailable)
	}
	return in, nil
}

// Config describes one microVM sandbox.
type Config struct {
	ID string
	// Dir is the sandbox's own host directory; Destroy removes it.
	Dir       string
	Workspace string
	Agent     string
	// UID and GID are the guest's sandbox user, and by default QEMU's host user too.
	UID, GID uint32
	// HostUID and HostGID, when set, are QEMU's host user instead: an id of the sandbox's
	// own range (see PrepareWorkspace). The workspace share then keeps the guest's owners
	// and modes in extended attributes (9p's mapped-xattr), so that the guest's user is
	// UID while every file is HostUID's on the host, and no mode the guest sets (setuid)
	// reaches the host's view.
	HostUID, HostGID uint32
	// Env is the default environment of the sandbox's commands.
	Env  []string
	Main *wire.Command
	// Limits are the guest's: Memory is its RAM (0: DefaultMemory); CPUs a CPU quota for
	// QEMU, the guest getting ceil(CPUs) vCPUs (0: one vCPU, no quota); Pids caps the
	// commands' processes and threads in a guest group of their own, SandboxPids the
	// guest's with the agent (QEMU's own cgroup has none: its threads are not the
	// sandbox's); Tmp sizes the guest's /tmp, a tmpfs in guest RAM (0: half of it).
	Limits  wire.Limits
	Install Install
	// BootTimeout bounds boot to the agent's announcement (0: DefaultBootTimeout).
	BootTimeout time.Duration
	// Accel is how the guest's CPU runs: AccelTCG unless DetectAccel found KVM working
	// ("" is TCG).
	Accel Accel
	// CapabilityKeys is the agent's capability keyring (wire.Envelope.CapabilityKeys).
	CapabilityKeys string
	// FileSizeLimit is RLIMIT_FSIZE for the sandbox's commands (wire.Envelope.FileSizeLimit).
	FileSizeLimit int64
}

// Sandbox is a running microVM.
type Sandbox struct {
	ID    string
	dir   string
	vmDir string
	group *cgroups.Group
	cmd   *exec.Cmd
	one   *sandbox.OneConn
	// Agent's AgentExited is closed once QEMU has exited: the guest's agent ended (it is
	// the guest's PID 1, whose end panics the guest kernel, and a panicked guest ends
	// QEMU), QEMU itself died, or Destroy.
	sandbox.Agent
}

// Start boots the guest and connects to its agent. A guest that does not announce its
// agent within the boot timeout is killed.
func Start(ctx context.Context, cfg Config) (*Sandbox, error) {
	sb := &Sandbox{ID: cfg.ID, dir: cfg.Dir, vmDir: filepath.Join(cfg.Dir, "vm")}
	if err := sb.start(ctx, cfg); err != nil {
		_ = sb.Destroy(context.WithoutCancel(ctx))
		return nil, err
	}
	return sb, nil
}

func (sb *Sandbox) start(ctx context.Context, cfg Config) (err error) {
	mem, vcpus, err := guestSize(cfg.Limits)
	if err != nil {
		return err
	}
	if err := CheckAgent(cfg.Agent); err != nil {
		return err
	}
	if err := os.MkdirAll(sb.vmDir, 0o700); err != nil {
		return fmt.Errorf("sandbox dir: %w", err)
	}
	if err := os.Chown(sb.vmDir, int(hostUser(cfg).Uid), int(hostUser(cfg).Gid)); err != nil {
		return fmt.Errorf("sandbox dir: %w", err)
	}
	initrd := filepath.Join(sb.vmDir, "initramfs.cpio")
	if err := buildInitramfs(initrd, cfg.Agent, cfg.Install.Modules, guestUser{cfg.UID, cfg.GID}); err != nil {
		return err
	}
	cgLimits := cgroups.Limits{MemoryBytes: mem + qemuOverhead, CPUs: cfg.Limits.CPUs}
	if sb.group, err = cgroups.Create("/paddock/"+cfg.ID, cgLimits); err != nil {
		return err
	}
	if err := sb.startQEMU(cfg, qemuArgs(cfg, sb.vmDir, initrd, mem, vcpus)); err != nil {
		return err
	}
	timeout := cfg.BootTimeout
	if timeout == 0 {
		timeout = DefaultBootTimeout
	}
	deadline := time.Now().Add(timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	c, err := sb.boot(deadline)
	if err != nil {
		if time.Now().After(deadline) {
			// QEMU too slow to open its control socket (a loaded host) is the same fault,
			// seen by the caller the same way.
			return sb.bootError(os.ErrDeadlineExceeded, timeout)
		}
		return err
	}
	if err := handshake(c, envelope(cfg), deadline); err != nil {
		c.Close()
		return sb.bootError(err, timeout)
	}
	sb.one = sandbox.NewOneConn(c)
	sb.AgentConn, err = sandbox.DialConn(sb.one)
	return err
}

// guestSize is the guest's RAM in bytes (whole MiB) and its vCPU count.
func guestSize(l wire.Limits) (mem int64, vcpus int, err error) {
	mem = int64(l.Memory)
	if mem == 0 {
		mem = DefaultMemory
	}
	if mem < MinMemory {
		return 0, 0, fmt.Errorf("memory %d MiB is below the %d MiB a microVM guest needs to boot: %w", mem>>20, MinMemory>>20, errdefs.ErrInvalidArgument)
	}
	vcpus = max(1, int(math.Ceil(l.CPUs)))
	return mem &^ (1<<20 - 1), vcpus, nil
}

// qemuArgs is QEMU's command line: a microvm machine with no network device, no firmware
// option ROMs and no default devices; a serial console into console.log; the channel port;
// the two 9p shares; a QMP socket; and -S, so the guest runs nothing before QEMU is in the
// sandbox's cgroup.
func qemuArgs(cfg Config, vmDir, initrd string, mem int64, vcpus int) []string {
	share := func(id, path, tag string, ro bool) []string {
		fsdev := fmt.Sprintf("local,id=%s,path=%s,security_model=none", id, escapeOpt(path))
		if ro {
			fsdev += ",readonly=on"
		}
		return []string{"-fsdev", fsdev, "-device", fmt.Sprintf("virtio-9p-device,fsdev=%s,mount_tag=%s", id, tag)}
	}
	accel, cpu := fmt.Sprintf("tcg,tb-size=%d", tbSizeMiB), "max"
	if cfg.Accel == AccelKVM {
		accel, cpu = "kvm", "host"
	}
	args := []string{
		"-M", "microvm,x-option-roms=off,isa-serial=on,rtc=on,pit=on,pic=on",
		"-accel", accel, "-cpu", cpu,
		"-m", strconv.FormatInt(mem>>20, 10) + "M",
		"-smp", strconv.Itoa(vcpus),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-S",
		"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
		"-kernel", cfg.Install.Kernel,
		"-initrd", initrd,
		"-append", kernelCmdline(cfg.Limits),
		"-serial", "file:" + filepath.Join(vmDir, "console.log"),
		"-chardev", "socket,id=agent,path=" + escapeOpt(filepath.Join(vmDir, "agent.sock")) + ",server=on,wait=off",
		"-device", "virtio-serial-device",
		"-device", "virtserialport,chardev=agent,name=" + wire.VMPortName,
		"-qmp", "unix:" + escapeOpt(filepath.Join(vmDir, "qmp.sock")) + ",server=on,wait=off",
	}
	args = append(args, share("usr", "/usr", wire.VMUsrTag, true)...)
	ws := share("ws", cfg.Workspace, wire.VMWorkspaceTag, false)
	if cfg.HostUID != 0 {
		ws[1] = strings.Replace(ws[1], "security_model=none", "security_model=mapped-xattr", 1)
	}
	return append(args, ws...)
}

// hostUser is the host user QEMU runs as.
func hostUser(cfg Config) syscall.Credential {
	if cfg.HostUID != 0 {
		return syscall.Credential{Uid: cfg.HostUID, Gid: cfg.HostGID}
	}
	return syscall.Credential{Uid: cfg.UID, Gid: cfg.GID}
}

// kernelCmdline is the guest kernel's command line. Under TCG the guest's TSC is the host's,
// and the kernel's calibration of it against the emulated PIT fails when the host is busy
// (it then hangs at boot), so the host's TSC frequency is handed in and the timer checks
// that rely on emulated timing are skipped.
func kernelCmdline(l wire.Limits) string {
	cmd := "console=ttyS0 quiet panic=-1 reboot=t no_timer_check tsc=reliable"
	if khz := hostTSCkHz(); khz > 0 {
		cmd += " tsc_early_khz=" + strconv.Itoa(khz)
	}
	if l.Pids > 0 {
		cmd += " " + wire.VMPidsEnv + "=" + strconv.FormatInt(l.SandboxPids(), 10)
	}
	if l.Tmp > 0 {
		cmd += " " + wire.VMTmpEnv + "=" + strconv.FormatInt(int64(l.Tmp), 10)
	}
	return cmd + " rdinit=/init -- " + wire.VMInitFlag
}

// hostTSCkHz is the host's TSC frequency where /proc/cpuinfo says it is constant and known
// (as in a VM: "cpu MHz" is then the TSC's), or 0.
func hostTSCkHz() int {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	var mhz float64
	var flags string
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		switch strings.TrimSpace(k) {
		case "cpu MHz":
			if mhz == 0 {
				mhz, _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
			}
		case "flags":
			if flags == "" {
				flags = " " + v + " "
			}
		}
	}
	if !strings.Contains(flags, " constant_tsc ") || !strings.Contains(flags, " tsc_known_freq ") {
		return 0
	}
	return int(math.Round(mhz * 1000))
}

// escapeOpt escapes a value for QEMU's comma-separated options.
func escapeOpt(s string) string { return strings.ReplaceAll(s, ",", ",,") }

func (sb *Sandbox) startQEMU(cfg Config, args []string) error {
	logf, err := os.OpenFile(filepath.Join(sb.vmDir, "qemu.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(cfg.Install.QEMU, args...)
	cmd.Env = []string{}
	cmd.Dir = sb.vmDir
	cmd.Stdout, cmd.Stderr = logf, logf
	// Under KVM, QEMU (unprivileged) opens /dev/kvm through the device's group, and gets
	// no other supplementary group.
	groups := []uint32{}
	if cfg.Accel == AccelKVM {
		kvm, err := kvmGroup()
		if err != nil {
			return err
		}
		groups = append(groups, kvm)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setsid:     true,
		Pdeathsig:  syscall.SIGKILL,
		Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
		Credential: &syscall.Credential{Uid: hostUser(cfg).Uid, Gid: hostUser(cfg).Gid, Groups: groups},
	}
	if err := spawn.Start(cmd); err != nil { // its Pdeathsig then follows this process
		return fmt.Errorf("start qemu: %w", err)
	}
	sb.cmd = cmd
	sb.AgentExited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(sb.AgentExited)
	}()
	return nil
}

// boot waits for QEMU's sockets, puts QEMU in the cgroup, connects to the channel and lets
// the guest run.
func (sb *Sandbox) boot(deadline time.Time) (net.Conn, error) {
	qmpSock := filepath.Join(sb.vmDir, "qmp.sock")
	// QEMU binds the socket, then listens on it: a dial in between is refused, so a
	// socket that exists is not yet one that answers (a load-dependent failure once).
	for {
		c, err := net.Dial("unix", qmpSock)
		if err == nil {
			c.Close()
			break
		}
		if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("qemu control socket: %w: %s", err, sb.qemuLog())
		}
		select {
		case <-sb.AgentExited:
			return nil, fmt.Errorf("qemu exited at start: %s: %w", sb.qemuLog(), errdefs.ErrUnavailable)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("qemu did not open its control socket: %w", errdefs.ErrUnavailable)
		}
	}
	q, err := dialQMP(qmpSock, deadline)
	if err != nil {
		return nil, fmt.Errorf("qemu control socket: %w: %s", err, sb.qemuLog())
	}
	defer q.close()
	if err := sb.group.Add(sb.cmd.Process.Pid); err != nil {
		return nil, err
	}
	c, err := net.Dial("unix", filepath.Join(sb.vmDir, "agent.sock"))
	if err != nil {
		return nil, fmt.Errorf("agent channel: %w", err)
	}
	if err := q.execute("cont"); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// handshake waits for the agent's announcement, then sends the envelope.
func handshake(c net.Conn, env *wire.Envelope, deadline time.Time) error {
	_ = c.SetDeadline(deadline)
	hello := make([]byte, len(wire.VMHello))
	if _, err := io.ReadFull(c, hello); err != nil {
		return err
	}
	if string(hello) != wire.VMHello {
		return fmt.Errorf("the guest sent %q, not the agent's announcement", hello)
	}
	if err := wire.WriteEnvelope(c, env); err != nil {
		return err
	}
	return c.SetDeadline(time.Time{})
}

func (sb *Sandbox) bootError(err error, timeout time.Duration) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("the microVM's agent did not answer within %s (guest console: %s): %w", timeout, sb.consoleTail(), errdefs.ErrUnavailable)
	}
	select {
	case <-sb.AgentExited:
		return fmt.Errorf("the microVM stopped while booting (guest console: %s; qemu: %s): %w", sb.consoleTail(), sb.qemuLog(), errdefs.ErrUnavailable)
	default:
	}
	return fmt.Errorf("microVM boot: %v (guest console: %s): %w", err, sb.consoleTail(), errdefs.ErrUnavailable)
}

func envelope(cfg Config) *wire.Envelope {
	return &wire.Envelope{
		Version: wire.EnvelopeVersion, SandboxID: cfg.ID, Tier: wire.TierMicroVM, Workspace: wire.VMWorkspace,
		// The channel is the virtio-serial port, not an inherited descriptor; the field is
		// required and unused in this tier.
		ListenFD: sandbox.AgentListenFD,
		Env:      cfg.Env, Main: cfg.Main,
		RunAs:          &wire.User{UID: cfg.UID, GID: cfg.GID},
		CapabilityKeys: cfg.CapabilityKeys, FileSizeLimit: cfg.FileSizeLimit,
		CommandPids: cfg.Limits.Pids,
	}
}

func (sb *Sandbox) qemuLog() string { return tail(filepath.Join(sb.vmDir, "qemu.log"), 400) }

func (sb *Sandbox) consoleTail() string { return tail(filepath.Join(sb.vmDir, "console.log"), 600) }

// tail is the end of a log, read from its last few KiB only: the guest writes the console
// and may have written a lot.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "empty"
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > 4096 {
		_, _ = f.Seek(fi.Size()-4096, io.SeekStart)
	}
	b, _ := io.ReadAll(io.LimitReader(f, 4096))
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "?"))
	if s == "" {
		return "empty"
	}
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}

// OOMKills counts the processes a memory limit killed: QEMU itself by the host cgroup's,
// and — the usual case, the guest's RAM being the sandbox's memory limit — the guest
// kernel's OOM kills, which its agent reports (Info's kernel_oom_kills). An agent that
// does not answer within a second leaves the guest's part out.
func (sb *Sandbox) OOMKills() (uint64, error) {
	var host uint64
	if sb.group != nil {
		var err error
		if host, err = sb.group.OOMKills(); err != nil {
			return 0, err
		}
	}
	if sb.AgentConn == nil {
		return host, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := pb.NewAgentClient(sb.AgentConn).Info(ctx, &pb.InfoRequest{})
	if err != nil {
		return host, nil // the agent is gone (QEMU killed, say): the host's count says it
	}
	return host + info.GetKernelOomKills(), nil
}

// LastError is the last error the agent logged on the guest console.
func (sb *Sandbox) LastError() string {
	return sandbox.LastLogError(filepath.Join(sb.vmDir, "console.log"))
}

// Cgroup is the sandbox's cgroup path (QEMU's).
func (sb *Sandbox) Cgroup() string { return "/paddock/" + sb.ID }

// Destroy kills QEMU and everything else in the sandbox's cgroup, and removes the cgroup
// and the sandbox's directory (sockets, initramfs, logs). It is idempotent.
func (sb *Sandbox) Destroy(ctx context.Context) error {
	_ = sb.CloseConn()
	sb.AgentConn = nil
	if sb.one != nil {
		sb.one.Close()
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var errs []error
	if sb.cmd != nil {
		_ = sb.cmd.Process.Kill()
		select {
		case <-sb.AgentExited:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("qemu (pid %d) did not exit after SIGKILL", sb.cmd.Process.Pid))
		}
		sb.cmd = nil
	}
	if sb.group != nil {
		errs = append(errs, sb.group.Kill(ctx), sb.group.Delete())
		sb.group = nil
	}
	errs = append(errs, os.RemoveAll(sb.dir))
	return errors.Join(errs...)
}
