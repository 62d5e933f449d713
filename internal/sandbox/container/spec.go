package container

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/wire"
)

// hostSystemDirs are bound read-only from the host: the coding tools it has (git, go, node,
// python) live there. Where the host has merged /usr (/bin -> usr/bin), the same symlink is
// made in the rootfs instead of a mount.
var hostSystemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// hostEtc lists what of the host's /etc a sandbox sees, read-only. Nothing else of /etc
// reaches it: no shadow, no keys, no host names, no sudoers, no package manager secrets.
var hostEtc = []string{
	"alternatives", "ssl/certs", "ca-certificates", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
	"localtime", "timezone", "os-release", "debian_version", "protocols", "services", "mime.types",
	"bash.bashrc", "profile", "inputrc", "magic", "terminfo", "nanorc", "vim",
	"fonts", // fontconfig's, for a browser in the sandbox (the coding agent's) to draw text
}

// maskedPaths and readonlyPaths are the usual container defaults: kernel interfaces a
// sandbox must not read or write.
var (
	maskedPaths = []string{
		"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/proc/sysrq-trigger",
		"/sys/firmware", "/sys/devices/virtual/powercap", "/sys/kernel",
	}
	readonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys"}
)

// deniedSyscalls are taken out of Docker's default allowlist: a sandbox has no business
// debugging other processes (ptrace would reach the agent if its non-dumpable flag ever
// slipped), and io_uring is the kernel's busiest source of escapes.
var deniedSyscalls = []string{"ptrace", "process_vm_readv", "process_vm_writev", "io_uring_setup", "io_uring_enter", "io_uring_register", "kcmp", "userfaultfd"}

// agentCaps are the agent's capabilities, and the container's bounding set: to start
// commands as the sandbox user (SETUID, SETGID), signal them (KILL), hand them their
// terminal (CHOWN), and keep their OOM score at 0 and watch any directory (DAC_OVERRIDE,
// DAC_READ_SEARCH, FOWNER), and start a gated exec in the gated root (SYS_CHROOT, see
// gated.go). Its file API drops them per call (package identity). A command
// runs with none: it is not root, so it has no effective or permitted capabilities, and
// no_new_privs keeps it from gaining the bounding set back through setuid or file caps.
var agentCaps = []string{"CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_SYS_CHROOT"}

// bundleSpec is everything buildSpec needs.
type bundleSpec struct {
	id        string
	hostname  string
	uid, gid  uint32
	workspace string // host path
	tmp       string // host path bound at /tmp; empty: a tmpfs
	shared    string // host path bound at wire.SharedPath; empty: none
	history   string // host path of the history store; empty: none
	agent     string // host path of paddock-agent
	env       []string
	limits    wire.Limits
	cgroup    string
	swap      bool // the host accounts swap (memsw on v1)
	// userKernel: the sandbox runs on gVisor's kernel (runsc), so the host sees the Sentry,
	// the Gofer and the Sentry's stub processes, not the sandbox's own processes. Two
	// limits then work differently (see buildSpec): the agent's OOM score, and pids.
	userKernel bool
	// userns: the sandbox gets a user namespace of its own (runc only; see idMappings),
	// mapped onto the host ids from idBase on: its root, the agent, is idBase on the host,
	// not the host's root.
	userns bool
	idBase uint32
	// gated: the sandbox has the gated root (gated.go), for execs a capability limits.
	gated bool
	// diskUID and diskGID own the sandbox user's files in the workspace on disk: its own
	// ids (0: uid and gid), or in a workspace of paddock's own its range's (ownWorkspace).
	diskUID, diskGID uint32
}

// AgentHostID is where the host ids of sandboxes with a user namespace begin: the first
// sandbox range's root (see idrange.go). Every id from it up is one no host user or file
// has, so that a process that broke out of a container would hold nothing on the host.
// Inside, the agent is uid 0 with agentCaps, which reach only what its namespace maps.
const AgentHostID = 1 << 31

// idmapWorkspace shows the workspace's files under the ids the sandbox's namespace maps:
// the sandbox user's own files (owned on disk by diskUID:diskGID) as its own, since that
// id is shown as the sandbox's host id for it (sandboxHostID); and the host root's files as
// the namespace's root's, the agent's. The agent needs that to create files there itself
// (history's restore makes each file as root, then gives it to the sandbox user), and in a
// workspace the host's root owns (paddock run --workspace of a root's directory) to enter
// it at all; the sandbox user keeps only what the permissions give "others" there, as
// without a namespace. The root's files must never be shown as the sandbox user's: what a
// command wrote would be stored as the host root's. On disk, a command's files are stored
// as diskUID:diskGID whatever range the sandbox holds: in a workspace of paddock's own, ids
// of a sandbox range that no host account has (ownWorkspace); in a host user's directory
// (--workspace), that user's. Any other owner's files are shown as nobody's.
//
// In an OCI mount's mappings ContainerID is the id on disk and HostID the id (in the host's
// terms) it is shown as, which the container's own mappings then translate.
func idmapWorkspace(s *specs.Spec, b bundleSpec) {
	diskUID, diskGID := cmp.Or(b.diskUID, b.uid), cmp.Or(b.diskGID, b.gid)
	uids := []specs.LinuxIDMapping{{ContainerID: diskUID, HostID: sandboxHostID(b.idBase, b.uid), Size: 1}}
	gids := []specs.LinuxIDMapping{{ContainerID: diskGID, HostID: sandboxHostID(b.idBase, b.gid), Size: 1}}
	if b.uid != 0 {
		uids = append(uids, specs.LinuxIDMapping{ContainerID: 0, HostID: b.idBase, Size: 1})
	}
	if b.gid != 0 {
		gids = append(gids, specs.LinuxIDMapping{ContainerID: 0, HostID: b.idBase, Size: 1})
	}
	// The shared directory is every sandbox of the user's, each with its own range: its
	// files are stored as the sandbox user's own ids, whatever the range.
	sharedUIDs := append([]specs.LinuxIDMapping{{ContainerID: b.uid, HostID: sandboxHostID(b.idBase, b.uid), Size: 1}}, uids[1:]...)
	sharedGIDs := append([]specs.LinuxIDMapping{{ContainerID: b.gid, HostID: sandboxHostID(b.idBase, b.gid), Size: 1}}, gids[1:]...)
	for i, m := range s.Mounts {
		switch m.Destination {
		case wire.WorkspacePath, wire.GatedRootPath + wire.WorkspacePath:
			s.Mounts[i].Options = append(s.Mounts[i].Options, "idmap")
			s.Mounts[i].UIDMappings, s.Mounts[i].GIDMappings = uids, gids
		case wire.SharedPath, wire.GatedRootPath + wire.SharedPath:
			s.Mounts[i].Options = append(s.Mounts[i].Options, "idmap")
			s.Mounts[i].UIDMappings, s.Mounts[i].GIDMappings = sharedUIDs, sharedGIDs
		}
	}
}

// agentOOMScore keeps the agent out of the OOM killer's way in its own sandbox.
const agentOOMScore = -998

// hostMadeNetns adapts the mounts of a sandbox with a user namespace to a network namespace
// the host made (Config.HostPorts): sysfs can be mounted only by a holder of CAP_SYS_ADMIN
// over the network namespace's owner, the host's user namespace, which the sandbox's root
// is not. /sys is then an empty read-only tmpfs: nothing of the host's sysfs (its network
// interfaces, devices) is shown in its place. Programs that count CPUs fall back from
// /sys/devices/system/cpu to /proc, as glibc's sysconf does.
func hostMadeNetns(s *specs.Spec) {
	for i, m := range s.Mounts {
		if m.Destination == "/sys" {
			s.Mounts[i] = specs.Mount{Destination: "/sys", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "noexec", "nodev", "ro", "size=4k", "mode=555"}}
		}
	}
}

// idMappings maps a sandbox's user namespace onto its range of host ids, which begins at
// base: every id of 0-65535 to base plus itself, so that its root, the agent, is base, and
// the sandbox user (id, which commands run as) is sandboxHostID(base, id). A sandbox user
// id past the range's end is mapped to its last id instead. Nothing maps to an id outside
// the range, the host's root least of all.
func idMappings(base, id uint32) []specs.LinuxIDMapping {
	if id < idRangeSize-1 {
		return []specs.LinuxIDMapping{{ContainerID: 0, HostID: base, Size: idRangeSize}}
	}
	return []specs.LinuxIDMapping{
		{ContainerID: 0, HostID: base, Size: idRangeSize - 1},
		{ContainerID: id, HostID: base + idRangeSize - 1, Size: 1},
	}
}

func buildSpec(b bundleSpec) (*specs.Spec, error) {
	s := &specs.Spec{
		Version:  specs.Version,
		Root:     &specs.Root{Path: "rootfs", Readonly: true},
		Hostname: b.hostname,
		Process: &specs.Process{
			// The agent is the container's root with agentCaps; commands run as b.uid
			// (the envelope's run_as), with no capabilities.
			User:            specs.User{UID: 0, GID: 0},
			Args:            []string{wire.AgentPath},
			Env:             b.env,
			Cwd:             wire.WorkspacePath,
			Capabilities:    &specs.LinuxCapabilities{Bounding: agentCaps, Effective: agentCaps, Permitted: agentCaps},
			NoNewPrivileges: true,
			Rlimits: []specs.POSIXRlimit{
				nofile(),
				{Type: "RLIMIT_CORE", Hard: 0, Soft: 0},
			},
		},
		Mounts: mounts(b),
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.MountNamespace}, {Type: specs.NetworkNamespace},
				{Type: specs.IPCNamespace}, {Type: specs.UTSNamespace}, {Type: specs.CgroupNamespace},
			},
			CgroupsPath:   b.cgroup,
			Resources:     resources(b.limits, b.swap),
			MaskedPaths:   maskedPaths,
			ReadonlyPaths: readonlyPaths,
		},
	}
	if b.userns {
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
		s.Linux.UIDMappings, s.Linux.GIDMappings = idMappings(b.idBase, b.uid), idMappings(b.idBase, b.gid)
		idmapWorkspace(s, b)
	}
	if b.userKernel {
		gvisorLimits(s, b.limits)
	} else if canLowerOOMScore() {
		// The agent must outlive a memory bomb in its own sandbox; the commands it starts
		// are put back to 0 (see session.spawn). Lowering the score needs CAP_SYS_RESOURCE,
		// which some hosts (and CI sandboxes) withhold: there the agent is not protected and
		// an OOM that takes it down ends the sandbox, which is still reported as OOM.
		s.Process.OOMScoreAdj = ptr(agentOOMScore)
	}
	sc, err := seccomp.GetDefaultProfile(s)
	if err != nil {
		return nil, fmt.Errorf("seccomp profile: %w", err)
	}
	s.Linux.Seccomp = withoutSetID(withoutSyscalls(sc, deniedSyscalls))
	return s, nil
}

// modeArgs are the system calls that give a file its mode bits, each with the index of its
// mode argument and, for the opens, of its flags (-1: it always creates or changes).
var modeArgs = []struct {
	name        string
	mode, flags uint
}{
	{"chmod", 1, noFlags}, {"fchmod", 1, noFlags}, {"fchmodat", 2, noFlags}, {"fchmodat2", 2, noFlags},
	{"creat", 1, noFlags}, {"mknod", 1, noFlags}, {"mknodat", 2, noFlags},
	{"open", 2, 1}, {"openat", 3, 2},
}

const (
	noFlags   = ^uint(0)
	setIDBits = unix.S_ISUID | unix.S_ISGID
	// creating: the open flags that make a file with the given mode.
	creating = unix.O_CREAT | unix.O_TMPFILE&^unix.O_DIRECTORY
)

// withoutSetID keeps the sandbox from making a setuid or setgid file: the system calls
// that set a mode are allowed only without those bits (an open only when it creates
// nothing), and everything else answers EPERM, the profile's default. Such a file in a
// workspace would keep its bits on the host, where a host user who reached it could run
// it as its owner. openat2, whose mode is inside a struct the filter cannot read, is
// refused with ENOSYS, so that callers fall back to openat. Setgid directories are lost
// with the rest; they grant nothing.
func withoutSetID(sc *specs.LinuxSeccomp) *specs.LinuxSeccomp {
	names := []string{"openat2"}
	for _, m := range modeArgs {
		names = append(names, m.name)
	}
	sc = withoutSyscalls(sc, names)
	for _, m := range modeArgs {
		sc.Syscalls = append(sc.Syscalls, specs.LinuxSyscall{Names: []string{m.name}, Action: specs.ActAllow,
			Args: []specs.LinuxSeccompArg{{Index: m.mode, Value: setIDBits, ValueTwo: 0, Op: specs.OpMaskedEqual}}})
		if m.flags != noFlags {
			sc.Syscalls = append(sc.Syscalls, specs.LinuxSyscall{Names: []string{m.name}, Action: specs.ActAllow,
				Args: []specs.LinuxSeccompArg{{Index: m.flags, Value: creating, ValueTwo: 0, Op: specs.OpMaskedEqual}}})
		}
	}
	enosys := uint(unix.ENOSYS)
	sc.Syscalls = append(sc.Syscalls, specs.LinuxSyscall{Names: []string{"openat2"}, Action: specs.ActErrno, ErrnoRet: &enosys})
	return sc
}

// gvisorLimits adapts a spec to runsc. runsc takes the rest of the runc spec as it is,
// with the same effect or a moot one: rlimits, no_new_privs, capabilities and the user are
// applied by the Sentry; the seccomp profile too, given --oci-seccomp (see RunscFlags);
// maskedPaths and readonlyPaths are ignored, since /proc and /sys are the Sentry's own and
// show nothing of the host's (/proc/kcore, /sys/firmware... are not there or are stubs);
// devpts is the Sentry's, one per sandbox (newinstance is moot); the cgroup namespace is a
// view of the Sentry's own cgroupfs; the mqueue mount is skipped. What must change is the
// limits, which work on the Sentry, not on the sandbox's processes:
//   - No OOM score: runsc gives the spec's score to the whole Sentry (so it would shield the
//     memory bomb too from the host's OOM killer), and the Sentry has no OOM killer of its
//     own to protect the agent from. A sandbox over its memory limit is killed as a whole
//     by the host (the memory is the Sentry's), which Run reports as OOM.
//   - pids: the host's pids cgroup counts the Sentry's threads and stub processes, and the
//     Sentry is a Go program that dies when it cannot make a thread: hitting pids.max
//     kills the whole sandbox instead of failing a fork. So the sandbox's own tasks are
//     limited inside gVisor, by RLIMIT_NPROC: the agent's is the sandbox's limit (it is
//     root in the sandbox, counted apart from the commands' user), the commands' their
//     own (see gvisorNproc); the host's pids.max stays as a backstop above what those
//     tasks can make the Sentry use (see sentryPids).
func gvisorLimits(s *specs.Spec, l wire.Limits) {
	if l.SandboxPids() <= 0 {
		return
	}
	n := uint64(l.SandboxPids())
	s.Process.Rlimits = append(s.Process.Rlimits, specs.POSIXRlimit{Type: "RLIMIT_NPROC", Hard: n, Soft: n})
	s.Linux.Resources.Pids = &specs.LinuxPids{Limit: ptr(sentryPids(l.SandboxPids()))}
}

// gvisorNproc is the commands' RLIMIT_NPROC under runsc (wire.Envelope.CommandNproc) for
// commands limited to l.Pids tasks, the command itself included; 0: none of their
// own. The Sentry counts it per user within the sandbox, threads included, as pids.max
// does; every command runs as the same unprivileged user, which cannot raise its hard
// limit. The agent (root in the sandbox) is not counted. Nor is a command's first process:
// the agent forks it as root, and the Sentry keeps a task on the counter of the user that
// made it when it then drops to the sandbox user. So a command gets the limit plus itself.
func gvisorNproc(l wire.Limits) int64 {
	if l.Pids <= 0 {
		return 0
	}
	return max(l.Pids-1, 1)
}

// sentryPids is the host's pids limit for a gVisor sandbox whose own tasks are limited to
// n: under systrap each sandbox process is a host stub process, which adds a host thread
// per thread of it running at once; the Sentry and the Gofer have threads of their own
// (a few dozen; hundreds under heavy blocking I/O).
func sentryPids(n int64) int64 { return 2*n + 512 }

// swapAccounted reports whether the host's memory controller accounts swap, so that a
// memory+swap limit can be set (cgroup v1 has it only with swapaccount=1; v2 always does).
func swapAccounted() bool {
	if cgroups.DetectMode() == cgroups.V2 {
		return true
	}
	_, err := os.Stat("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
	return err == nil
}

// nofile is the sandbox's open-file limit: 65536, or the host's own hard limit if lower
// (raising it needs CAP_SYS_RESOURCE).
func nofile() specs.POSIXRlimit {
	n := uint64(65536)
	var cur unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &cur); err == nil && cur.Max < n {
		n = cur.Max
	}
	return specs.POSIXRlimit{Type: "RLIMIT_NOFILE", Hard: n, Soft: n}
}

// canLowerOOMScore reports whether this process holds CAP_SYS_RESOURCE.
func canLowerOOMScore() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[0].Effective&(1<<unix.CAP_SYS_RESOURCE) != 0
}

func ptr[T any](v T) *T { return &v }

func resources(l wire.Limits, swap bool) *specs.LinuxResources {
	r := &specs.LinuxResources{
		Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
	}
	if l.Memory > 0 {
		r.Memory = &specs.LinuxMemory{Limit: ptr(int64(l.Memory))}
		if swap {
			r.Memory.Swap = ptr(int64(l.Memory)) // memory+swap = memory: no swap
		}
	}
	if l.CPUs > 0 {
		const period = 100000
		r.CPU = &specs.LinuxCPU{Period: ptr(uint64(period)), Quota: ptr(int64(l.CPUs * period))}
	}
	if l.SandboxPids() > 0 {
		r.Pids = &specs.LinuxPids{Limit: ptr(l.SandboxPids())}
	}
	return r
}

func mounts(b bundleSpec) []specs.Mount {
	ms := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777", fmt.Sprintf("size=%d", tmpSize(b.limits))}},
		{Destination: wire.AgentPath, Type: "bind", Source: b.agent, Options: []string{"bind", "ro", "nosuid", "nodev"}},
		{Destination: wire.WorkspacePath, Type: "bind", Source: b.workspace, Options: []string{"bind", "rw", "nosuid", "nodev"}},
	}
	if t := trampoline(b.agent); t != "" {
		ms = append(ms, roBind(t, wire.TrampolinePath))
	}
	if b.tmp != "" {
		for i, m := range ms {
			if m.Destination == "/tmp" {
				ms[i] = specs.Mount{Destination: "/tmp", Type: "bind", Source: b.tmp, Options: []string{"bind", "rw", "nosuid", "nodev"}}
			}
		}
	}
	if b.shared != "" {
		ms = append(ms, specs.Mount{Destination: wire.SharedPath, Type: "bind", Source: b.shared, Options: []string{"bind", "rw", "nosuid", "nodev"}})
	}
	if b.history != "" {
		ms = append(ms, specs.Mount{Destination: wire.HistoryPath, Type: "bind", Source: b.history, Options: []string{"bind", "rw", "nosuid", "nodev", "noexec"}})
	}
	for _, d := range hostSystemDirs {
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
			ms = append(ms, roBind(d, d))
		}
	}
	for _, e := range hostEtc {
		p := filepath.Join("/etc", e)
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			ms = append(ms, roBind(p, p))
		}
	}
	if b.gated {
		ms = append(ms, gatedMounts(b)...)
	}
	return ms
}

func roBind(src, dst string) specs.Mount {
	return specs.Mount{Destination: dst, Type: "bind", Source: src, Options: []string{"bind", "ro", "nosuid", "nodev"}}
}

// withoutSyscalls drops names from every allow rule of a profile whose default denies.
func withoutSyscalls(sc *specs.LinuxSeccomp, names []string) *specs.LinuxSeccomp {
	for i := range sc.Syscalls {
		r := &sc.Syscalls[i]
		if r.Action == specs.ActAllow {
			r.Names = slices.DeleteFunc(r.Names, func(n string) bool { return slices.Contains(names, n) })
		}
	}
	sc.Syscalls = slices.DeleteFunc(sc.Syscalls, func(r specs.LinuxSyscall) bool { return len(r.Names) == 0 })
	return sc
}

// trampoline is the host path of paddock-exec beside the agent binary, or "".
func trampoline(agent string) string {
	if agent == "" {
		return ""
	}
	p := filepath.Join(filepath.Dir(agent), "paddock-exec")
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return p
	}
	return ""
}
