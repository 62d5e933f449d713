// Package container runs a sandbox as an OCI container: a bundle built from runtime-spec
// types, run by an OCI runtime binary (runc; runsc for gVisor).
//
// Threat model: everything inside the container is hostile. The container gets its own pid,
// mount, network (loopback only), ipc, uts and cgroup namespaces, and under runc a user
// namespace (Config.UserNS) in which its root, the agent, is an unprivileged id on the host
// (AgentHostID) and only the sandbox user keeps its own id; a read-only root made of
// the host's /usr and a curated /etc; a non-root user with no capabilities and
// no_new_privs; Docker's default seccomp allowlist less ptrace and io_uring; cgroup limits.
// The agent's channel is a Unix socket created on the host and inherited by the agent as a
// file descriptor (under runc a listening socket, under runsc one connected socket; see
// channel.go): no path of it exists in the sandbox, so nothing in the sandbox but the agent
// can reach it, and the host knows which sandbox speaks by which socket it holds.
//
// Under runsc (gVisor) the same bundle runs on gVisor's user-space kernel instead of the
// host's: the sandbox's system calls never reach the host kernel, which only sees the
// sandbox's Sentry and Gofer processes, themselves in namespaces, a cgroup and a seccomp
// filter of their own.
package container

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/sandbox"
	"github.com/paddockhq/paddock/internal/wire"
)

// tmpSize sizes the /tmp tmpfs, whose pages count against the memory limit: l.Tmp, or
// a quarter of the memory, at most 1 GiB. Not used when Config.Tmp puts /tmp on disk.
func tmpSize(l wire.Limits) int64 {
	switch {
	case l.Tmp > 0:
		return int64(l.Tmp)
	case l.Memory > 0:
		return min(1<<30, int64(l.Memory)/4)
	}
	return 1 << 30
}

// Runtime drives an OCI runtime binary. Runc and Runsc make one; what differs between the
// two runtimes is in its fields, not in branches on its name.
type Runtime struct {
	// Name is "runc" or "runsc".
	Name string
	// Binary is the runtime's executable.
	Binary string
	// StateDir is the runtime's --root: its own bookkeeping of containers.
	StateDir string
	// Flags are the runtime's global flags, given after --root to every command.
	Flags []string
	Log   *slog.Logger

	// runFlags hand the agent's channel (the first file after stdio) to the container.
	runFlags []string
	// connected: the channel is one connected socket rather than a listening one, and the
	// agent is told so by agentArgs (see channel.go).
	connected bool
	agentArgs []string
	// userKernel: the runtime runs the sandbox on a kernel of its own in user space (gVisor),
	// which changes how some limits are expressed (see gvisorLimits).
	userKernel bool
}

// Runc returns the runtime for runc at binary, with its state under stateDir.
func Runc(binary, stateDir string, log *slog.Logger) *Runtime {
	return &Runtime{
		Name: "runc", Binary: binary, StateDir: stateDir, Log: log,
		runFlags: []string{"--preserve-fds", "1"},
	}
}

// RunscFlags are runsc's global flags:
//   - --platform=systrap: how the Sentry traps the sandbox's system calls. systrap (gVisor's
//     default) needs no hardware support; KVM hangs under nested virtualisation, ptrace is
//     the slow legacy platform.
//   - --network=none: the sandbox gets gVisor's netstack with a loopback interface only, as
//     under runc (an empty network namespace with lo). The Sentry itself runs in a new,
//     empty host network namespace.
//   - --oci-seccomp: gVisor ignores the spec's seccomp profile unless told otherwise; with
//     it, the Sentry enforces the profile on the sandbox's system calls, so that what runc
//     denies (ptrace, io_uring, ...) is denied under runsc too, on top of gVisor's own
//     filter on the Sentry.
//   - --gofer-network-namespace=new: the Gofer (gVisor's file server) gets an empty network
//     namespace of its own. The default, null, shares one pinned by a bind mount in --root
//     that outlives every sandbox; new leaves nothing behind.
//
// cgroups are kept (no --ignore-cgroups): runsc puts the Sentry and the Gofer in the
// sandbox's cgroup and applies the spec's limits to it, on v1 and v2. --host-uds stays at
// its default, none: the sandbox can neither connect to nor create host Unix sockets.
var RunscFlags = []string{"--platform=systrap", "--network=none", "--oci-seccomp", "--gofer-network-namespace=new"}

// Runsc returns the runtime for gVisor's runsc at binary, with its state under stateDir.
func Runsc(binary, stateDir string, log *slog.Logger) *Runtime {
	return &Runtime{
		Name: "runsc", Binary: binary, StateDir: stateDir, Log: log,
		Flags: slices.Clone(RunscFlags),
		// runsc has no --preserve-fds; --pass-fd maps a host descriptor to one in the
		// sandbox, and only a connected Unix socket can cross (see channel.go).
		runFlags:   []string{"--pass-fd", fmt.Sprintf("%d:%d", sandbox.AgentListenFD, sandbox.AgentListenFD)},
		connected:  true,
		agentArgs:  []string{wire.ConnectedFlag},
		userKernel: true,
	}
}

// runtimeEnv is the whole environment of the runtime's commands. Nothing of the host's own
// (the control plane's environment may hold its configuration and credentials) is passed
// on: under runsc the Sentry and the Gofer that serve the sandbox live as long as it does,
// with the environment they were started with, and a sandbox that got into the Sentry
// would read it there (internal/containment's TestEnvironment, run under runsc, found the
// host's canary in them). The sandbox's own environment is the spec's, either way.
var runtimeEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

// command is the runtime's command line for args, with its global flags.
func (rt *Runtime) command(ctx context.Context, args ...string) *exec.Cmd {
	all := append(append([]string{"--root", rt.StateDir}, rt.Flags...), args...)
	cmd := exec.CommandContext(ctx, rt.Binary, all...)
	cmd.Env = runtimeEnv
	return cmd
}

// Config describes one container sandbox.
type Config struct {
	ID string
	// Dir is the sandbox's own host directory: bundle, socket, logs. Destroy removes it.
	Dir       string
	Workspace string // host directory bound at /workspace
	// OwnWorkspace says the workspace is paddock's own, not a directory of a host user's
	// (--workspace): with a user namespace, Start gives its sandbox user's files to the
	// sandbox's range (ownWorkspace), so that on disk they belong to no host account.
	OwnWorkspace bool
	// Tmp, when set, is a host directory (mode 1777, root's) bound at /tmp instead of a
	// tmpfs: the sandbox's disk image's (runner's disk quotas).
	Tmp string
	// Shared, when set, is the user's shared directory (root's, its contents the sandbox
	// user's, stored as UID:GID), bound at wire.SharedPath.
	Shared string
	// History is the host directory of the workspace's history, bound at wire.HistoryPath; it
	// must be root's and 0700. Empty: the sandbox keeps no history.
	History  string
	Agent    string // host path of the paddock-agent binary; paddock-exec beside it is bound too
	UID, GID uint32
	Env      []string
	Main     *wire.Command
	Limits   wire.Limits
	// HostPorts are ports of the sandbox's loopback where the host listens itself (the
	// host's services). Under runc the host makes the sandbox's network namespace and
	// binds them there before the container starts (Sandbox.Listener), and the agent is
	// told to leave them alone; under runsc they are left to the agent's relay. With
	// none, runc makes the namespace as before, and Sandbox.Dial is unavailable (the
	// caller goes through the agent): `paddock run` pays nothing for what it does not use.
	HostPorts []int
	// CapabilityKeys is the agent's capability keyring (wire.Envelope.CapabilityKeys).
	CapabilityKeys string
	// FileSizeLimit is RLIMIT_FSIZE for the sandbox's commands (wire.Envelope.FileSizeLimit).
	FileSizeLimit int64
	// UserNS gives the sandbox a user namespace of its own under runc, mapped onto a range
	// of host ids that no other sandbox holds (idrange.go): its root (the agent) is the
	// range's first id instead of the host's root, and Start gives History to it. runsc
	// ignores it (gVisor's kernel is the boundary there).
	UserNS bool
	// IDBase is the range's first id. Start claims a free range when it is zero; WriteBundle
	// then uses the first range.
	IDBase uint32
	// Ready, when set, is waited for before Start reads the workspace or Tmp, or starts the
	// container: the caller mounts a new, empty workspace meanwhile, while Start writes
	// the bundle. Its error ends the start. The ID range prefers none for such a workspace.
	Ready func() error
}

// Sandbox is a running container.
type Sandbox struct {
	ID     string
	rt     *Runtime
	dir    string
	cgroup string
	// Agent's AgentExited is closed when the agent has exited (see watchExit); nil
	// without a hold on it.
	sandbox.Agent
	// closeChannel releases the host's end of the channel if AgentConn never took it.
	closeChannel func()
	// init is a pidfd on the container's first process (the agent), or -1.
	init int
	// net is the host's hold on the sandbox's network namespace (runc only), or nil.
	net *hostNet
	// idBase is the first host id of the sandbox's range, or 0 without a user namespace.
	idBase uint32
}

// Start creates and starts the container, and returns once the agent's process runs. The
// agent may still be starting: the first RPC on Conn waits for it.
func (rt *Runtime) Start(ctx context.Context, cfg Config) (*Sandbox, error) {
	sb := &Sandbox{ID: cfg.ID, rt: rt, dir: cfg.Dir, cgroup: "/paddock/" + cfg.ID, init: -1}
	if err := sb.start(ctx, cfg); err != nil {
		_ = sb.Destroy(context.WithoutCancel(ctx))
		return nil, err
	}
	return sb, nil
}

func (sb *Sandbox) start(ctx context.Context, cfg Config) error {
	rt := sb.rt
	// 0711: a sandbox with a user namespace has runc set up its rootfs as the namespace's
	// root, an unprivileged host id that must be able to reach the rootfs (not list it).
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "bundle"), 0o711); err != nil {
		return fmt.Errorf("sandbox dir: %w", err)
	}
	netnsPath := ""
	if !rt.userKernel && len(cfg.HostPorts) > 0 {
		hn, err := newHostNet(cfg.HostPorts)
		if err != nil {
			return fmt.Errorf("the sandbox's network: %w", err)
		}
		sb.net, netnsPath = hn, hn.ns.Path()
	}
	if userns(rt, cfg) {
		if cfg.IDBase == 0 {
			// A persistent sandbox asks for the range its history store (or its
			// workspace) already belongs to, so that a restart need not give either
			// to another.
			prefer := ownerOf(cfg.History)
			if !IsAgentHostID(prefer) && cfg.OwnWorkspace && cfg.Ready == nil {
				prefer = rangeOf(ownerOf(cfg.Workspace))
			}
			base, err := claimIDRange(cfg.Dir, prefer)
			if err != nil {
				return fmt.Errorf("the sandbox's user namespace: %w", err)
			}
			cfg.IDBase = base
		}
		sb.idBase = cfg.IDBase
	}
	if cfg.History != "" {
		if err := ownHistory(cfg.History, sb.idBase); err != nil {
			return fmt.Errorf("history store: %w", err)
		}
	}
	bundle := filepath.Join(cfg.Dir, "bundle")
	if err := mountBundleFS(bundle); err != nil {
		return err
	}
	if err := writeRootfs(cfg, bundle, rt.userKernel); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	ch, err := rt.openChannel(cfg.Dir)
	if err != nil {
		return err
	}
	defer ch.sandboxEnd.Close()
	sb.closeChannel = ch.close
	env := &wire.Envelope{
		Version: wire.EnvelopeVersion, SandboxID: cfg.ID, Tier: wire.TierContainer, Workspace: wire.WorkspacePath,
		ListenFD: sandbox.AgentListenFD, Env: cfg.Env, Main: cfg.Main, RunAs: &wire.User{UID: cfg.UID, GID: cfg.GID},
		CapabilityKeys: cfg.CapabilityKeys, FileSizeLimit: cfg.FileSizeLimit,
	}
	if trampoline(cfg.Agent) != "" {
		env.Trampoline = wire.TrampolinePath
	}
	if !rt.userKernel {
		env.GatedRoot = wire.GatedRootPath
	} else {
		env.CommandNproc = gvisorNproc(cfg.Limits)
	}
	var cmdGroups []*os.File
	if !rt.userKernel {
		cmdGroups, env.CommandCgroups, err = sb.delegateCommands(cfg.Limits)
		if l := commandLimits(cfg.Limits); err == nil {
			env.CommandMemory, env.CommandPids = l.MemoryBytes, l.Pids
		}
		if err != nil {
			rt.Log.Warn("the sandbox's commands share the agent's cgroup: no reserve for the agent, and an exec's processes may outlive it", "sandbox", cfg.ID, "err", err)
		}
		defer func() {
			for _, f := range cmdGroups {
				f.Close()
			}
		}()
	}
	if cfg.History != "" {
		env.HistoryDir = wire.HistoryPath
	}
	if sb.net != nil {
		for p := range sb.net.listeners {
			env.HostPorts = append(env.HostPorts, uint32(p))
		}
	}
	if cfg.Ready != nil {
		if err := cfg.Ready(); err != nil {
			return err
		}
	}
	if sb.idBase != 0 && cfg.OwnWorkspace {
		if err := ownWorkspace(cfg.Workspace, sb.idBase, cfg.UID, cfg.GID); err != nil {
			return fmt.Errorf("workspace: %w", err)
		}
	}
	if err := rt.writeSpec(cfg, bundle, sb.cgroup, netnsPath); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	if err := rt.run(ctx, cfg, append([]*os.File{ch.sandboxEnd}, cmdGroups...), env); err != nil {
		return err
	}
	var pid int
	if sb.init, pid, err = openInit(filepath.Join(cfg.Dir, "init.pid")); err != nil {
		return fmt.Errorf("%s run: the container's first process: %w", rt.Name, err)
	}
	sb.watchExit()
	if userns(rt, cfg) && canLowerOOMScore() {
		// runc applies the spec's OOM score from inside the user namespace, where lowering
		// it is not allowed: the host does it (see buildSpec for why the agent needs it).
		if err := protectFromOOM(pid); err != nil {
			return fmt.Errorf("the agent's OOM score: %w", err)
		}
	}
	sb.AgentConn, err = ch.dial()
	return err
}

// writeSpec writes the sandbox's config.json into bundle, whose rootfs is written;
// netnsPath, when set, is the network namespace the container joins instead of making its
// own.
func (rt *Runtime) writeSpec(cfg Config, bundle, cgroup, netnsPath string) error {
	args := append([]string{wire.AgentPath}, rt.agentArgs...)
	return writeConfig(cfg, bundle, cgroup, rt.userKernel, func(s *specs.Spec) {
		s.Process.Args = args
		if netnsPath == "" {
			return
		}
		for i, ns := range s.Linux.Namespaces {
			if ns.Type == specs.NetworkNamespace {
				s.Linux.Namespaces[i].Path = netnsPath
			}
		}
		if userns(rt, cfg) {
			hostMadeNetns(s)
		}
	})
}

// ownHistory gives the history store, and everything in it, to the sandbox's root as the
// host sees it: id, the first of the sandbox's range with a user namespace, else 0, the
// host's root. A store kept from an earlier start under another range or setting (every
// start claims a range anew; an upgrade, a changed runtime) changes hands whole, the
// directory itself last, so that one left half done by a crash is done again; one already
// right costs a stat. Links are changed, never followed.
func ownHistory(dir string, base uint32) error {
	id := int(base)
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == id && int(st.Gid) == id {
		return nil
	}
	err = filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		return os.Lchown(p, id, id)
	})
	if err != nil {
		return err
	}
	return os.Lchown(dir, id, id)
}

// ownWorkspace gives the sandbox user's files in a workspace of paddock's own to the ids
// the sandbox's range maps that user to (sandboxHostID), ids no host account has: a fresh
// workspace at once (its root alone), one made before ranges (its sandbox user's id on
// disk) or one whose range was taken by another sandbox meanwhile by a walk, once.
// Root's files (the agent's) stay root's. The idmapped mount then shows the owner's files
// as the sandbox user's (idmapWorkspace), whatever range a later start holds.
func ownWorkspace(dir string, base, uid, gid uint32) error {
	var st syscall.Stat_t
	if err := syscall.Lstat(dir, &st); err != nil {
		return err
	}
	hostUID, hostGID := sandboxHostID(base, uid), sandboxHostID(base, gid)
	if st.Uid == hostUID && st.Gid == hostGID {
		return nil
	}
	oldUID, oldGID := st.Uid, st.Gid
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		u, g := -1, -1
		if st.Uid == oldUID {
			u = int(hostUID)
		}
		if st.Gid == oldGID {
			g = int(hostGID)
		}
		if u == -1 && g == -1 {
			return nil
		}
		return os.Lchown(p, u, g)
	})
}

// userns says whether cfg's sandbox gets a user namespace (Config.UserNS; runc only).
func userns(rt *Runtime, cfg Config) bool { return cfg.UserNS && !rt.userKernel }

// protectFromOOM gives process pid the OOM score the spec asks for.
func protectFromOOM(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid), []byte(strconv.Itoa(agentOOMScore)), 0)
}

// WriteBundle writes the OCI bundle paddock runs under runc for cfg into dir, with args as
// the container's process instead of the agent, run as the command would be (the sandbox
// user, no capabilities). Benchmarks use it to run exactly paddock's container under a
// bare runtime.
func WriteBundle(cfg Config, dir, cgroup string, args []string) error {
	return Runc("", "", nil).WriteBundle(cfg, dir, cgroup, args)
}

// WriteBundle is the package's WriteBundle for rt: under runsc the bundle is the one Start
// writes for gVisor (no user namespace, no gated root, gVisor's limits).
func (rt *Runtime) WriteBundle(cfg Config, dir, cgroup string, args []string) error {
	return writeBundle(cfg, dir, cgroup, rt.userKernel, func(s *specs.Spec) {
		p := s.Process
		p.Args = args
		p.User = specs.User{UID: cfg.UID, GID: cfg.GID, AdditionalGids: []uint32{cfg.GID}}
		p.Capabilities = &specs.LinuxCapabilities{}
	})
}

func writeBundle(cfg Config, dir, cgroup string, userKernel bool, edit func(*specs.Spec)) error {
	if err := writeRootfs(cfg, dir, userKernel); err != nil {
		return err
	}
	return writeConfig(cfg, dir, cgroup, userKernel, edit)
}

// writeRootfs writes the bundle's rootfs, which needs nothing of the workspace.
func writeRootfs(cfg Config, dir string, userKernel bool) error {
	b := bundleSpec{uid: cfg.UID, gid: cfg.GID, agent: cfg.Agent, hostname: "sandbox", gated: !userKernel}
	if err := makeRootfs(filepath.Join(dir, "rootfs"), b); err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	return nil
}

// writeConfig writes the bundle's config.json, edited by edit.
func writeConfig(cfg Config, dir, cgroup string, userKernel bool, edit func(*specs.Spec)) error {
	b := bundleSpec{
		id: cfg.ID, hostname: "sandbox", uid: cfg.UID, gid: cfg.GID, workspace: cfg.Workspace, tmp: cfg.Tmp, shared: cfg.Shared,
		history: cfg.History, agent: cfg.Agent, env: cfg.Env, limits: cfg.Limits, cgroup: cgroup, swap: swapAccounted(),
		userKernel: userKernel, userns: !userKernel && cfg.UserNS, idBase: cfg.IDBase,
		diskUID: cfg.UID, diskGID: cfg.GID,
		// gVisor has no Landlock, so no exec there runs in the gated root.
		gated: !userKernel,
	}
	var st syscall.Stat_t
	if cfg.OwnWorkspace && syscall.Lstat(cfg.Workspace, &st) == nil && IsRangeID(st.Uid) && IsRangeID(st.Gid) {
		b.diskUID, b.diskGID = st.Uid, st.Gid
	}
	if b.idBase == 0 {
		b.idBase = AgentHostID
	}
	spec, err := buildSpec(b)
	if err != nil {
		return err
	}
	edit(spec)
	return writeJSON(filepath.Join(dir, "config.json"), spec)
}

// run starts the container detached: the runtime passes its stdio through to the agent, so
// the envelope goes in on stdin and the agent's log comes out in agent.log.
func (rt *Runtime) run(ctx context.Context, cfg Config, inherit []*os.File, env *wire.Envelope) error {
	stdin, release, err := sandbox.EnvelopePipe(env)
	if err != nil {
		return err
	}
	defer stdin.Close()
	release()
	logf, err := os.OpenFile(filepath.Join(cfg.Dir, "agent.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	flags := rt.runFlags
	if len(inherit) > 1 {
		// runc hands the container every file after stdio that it is told of.
		flags = []string{"--preserve-fds", strconv.Itoa(len(inherit))}
	}
	args := append(append([]string{"run", "--detach", "--pid-file", filepath.Join(cfg.Dir, "init.pid")}, flags...), "--bundle", filepath.Join(cfg.Dir, "bundle"), cfg.ID)
	cmd := rt.command(ctx, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = stdin, logf, logf, inherit
	if err := cmd.Run(); err != nil {
		why := sandbox.LastLogError(filepath.Join(cfg.Dir, "agent.log"))
		if strings.Contains(why, "MOUNT_ATTR_IDMAP") {
			why += "; paddock binds the workspace through an idmapped mount under a user namespace: give a workspace on a filesystem " +
				"that supports one (ext4, xfs, btrfs; tmpfs since Linux 6.3), or set user_namespace: false in the runner's configuration"
		}
		return fmt.Errorf("%s run: %s: %w", rt.Name, why, errdefs.ErrUnavailable)
	}
	return nil
}

func notExist(runtimeOutput []byte) bool {
	return bytes.Contains(runtimeOutput, []byte("not exist"))
}

// openInit opens a pidfd on the process the runtime's pid file names, and returns it with
// the pid. Through the pidfd Destroy kills and awaits that very process, even if the pid
// is reused later.
func openInit(pidFile string) (pidfd, pid int, err error) {
	if pid, err = readPid(pidFile); err != nil {
		return -1, 0, fmt.Errorf("pid file %s: %w", pidFile, err)
	}
	pidfd, err = unix.PidfdOpen(pid, 0)
	return pidfd, pid, err
}

// killAndWait sends SIGKILL through a pidfd and waits until the process has exited.
func killAndWait(ctx context.Context, pidfd int) error {
	if err := unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill the container's init: %w", err)
	}
	deadline, _ := ctx.Deadline()
	for {
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(time.Until(deadline).Milliseconds()))
		switch {
		case n > 0:
			return nil
		case err != nil && !errors.Is(err, unix.EINTR):
			return fmt.Errorf("wait for the container's init: %w", err)
		case time.Now().After(deadline):
			return fmt.Errorf("the container's init outlived SIGKILL: %w", context.DeadlineExceeded)
		}
	}
}

// OOMKills reads how many processes the memory limit killed. Read it before Destroy.
func (sb *Sandbox) OOMKills() (uint64, error) {
	g, err := cgroups.Load(sb.cgroup)
	if err != nil {
		return 0, err
	}
	return g.OOMKills()
}

// HostIDs are the host uid and gid its sandbox user's commands run as (the agent is the
// range's first id): the ids' own under runsc or without a user namespace.
func (sb *Sandbox) HostIDs(uid, gid uint32) (uint32, uint32) {
	if sb.idBase == 0 {
		return uid, gid
	}
	return sandboxHostID(sb.idBase, uid), sandboxHostID(sb.idBase, gid)
}

// Cgroup is the sandbox's cgroup path.
func (sb *Sandbox) Cgroup() string { return sb.cgroup }

// LastError is the last error the agent or the runtime logged, for error messages.
func (sb *Sandbox) LastError() string {
	return sandbox.LastLogError(filepath.Join(sb.dir, "agent.log"))
}

// Destroy kills every process of the sandbox and removes the container, its cgroup and its
// directory. It is idempotent.
func (sb *Sandbox) Destroy(ctx context.Context) error {
	_ = sb.CloseConn()
	if sb.closeChannel != nil {
		sb.closeChannel()
	}
	if sb.net != nil {
		sb.net.close() // not set to nil: Dial and Listener may be reading it
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var errs []error
	// Killing the container's first process ends its pid namespace, so every process in
	// it; a plain delete then only removes what is left. `delete --force` would do both,
	// but runc's sleeps a fixed 100 ms after its kill (delete.go, killContainer): most of
	// a destroy (table 1 of docs/benchmarks.md).
	if sb.init >= 0 {
		errs = append(errs, killAndWait(ctx, sb.init))
		unix.Close(sb.init)
		sb.init = -1
	}
	out, err := sb.rt.command(ctx, "delete", sb.ID).CombinedOutput()
	if err != nil && !notExist(out) {
		out, err = sb.rt.command(ctx, "delete", "--force", sb.ID).CombinedOutput()
	}
	if err != nil && !notExist(out) {
		errs = append(errs, fmt.Errorf("%s delete %s: %s", sb.rt.Name, sb.ID, bytes.TrimSpace(out)))
	}
	if g, err := cgroups.Load(sb.cgroup); err == nil {
		errs = append(errs, g.Kill(ctx), g.Delete())
	}
	releaseIDRange(sb.dir)
	errs = append(errs, RemoveState(sb.dir))
	return errors.Join(errs...)
}
