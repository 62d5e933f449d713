//go:build linux

package harden

import (
	"fmt"
	"math/bits"
	"runtime"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// deniedEPERM are refused outright: each is either kernel attack surface an unprivileged
// sandbox has no use for, or a way to reach outside the sandbox.
var deniedEPERM = []string{
	// Other processes' memory, file descriptors and kernel objects.
	"ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd", "kcmp",
	// Kernel keyrings.
	"keyctl", "add_key", "request_key",
	// Large kernel attack surface.
	"bpf", "perf_event_open", "userfaultfd", "lookup_dcookie",
	// The kernel itself, and the machine.
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "vhangup", "syslog",
	// Mounts and the mount API.
	"mount", "umount2", "pivot_root", "open_tree", "open_tree_attr", "move_mount",
	"fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	// Namespaces: no new ones, no joining others.
	"unshare", "setns",
	// File handles bypass path-based checks such as Landlock's.
	"name_to_handle_at", "open_by_handle_at",
}

// deniedENOSYS are refused as if the kernel did not have them, so that libraries fall back:
// glibc retries clone3 as clone (which this filter can inspect; clone3 takes its flags in
// memory it cannot read) and runtimes treat io_uring as absent.
var deniedENOSYS = []string{"clone3", "io_uring_setup", "io_uring_enter", "io_uring_register"}

// cloneNewFlags are the namespace flags clone must not carry. CLONE_NEWTIME is absent: in
// clone's first argument its bit is part of the exit signal; unshare and clone3 are refused.
const cloneNewFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// perLinux is the default persona; personalityQuery asks for the current one without
// changing it, and as an int it may arrive sign-extended.
const (
	perLinux           = 0
	personalityQuery32 = 0xffffffff
	personalityQuery64 = 0xffffffffffffffff
)

func errno(e unix.Errno) seccomp.Action { return seccomp.ActionErrno | seccomp.Action(e) }

// SeccompPolicy returns the deny list Apply installs, before assembly. The default action is
// allow; SeccompProgram adds the architecture check around it.
//
// go-seccomp-bpf v1.6.0 does not reload the syscall number after an argument check fails:
// the syscalls checked after it are compared with the argument last loaded instead. So each
// syscall appears in one group only (a later group for the same syscall would be skipped:
// fail open), the groups with argument checks come last, and they are ordered so that the
// values such a failed check leaves behind (socket families and protocols, send flags,
// personality 0 or ~0, clone flags with nothing but an exit signal) are not, in practice, the
// number of a later syscall.
// TestSeccompProgram holds cases for each.
func SeccompPolicy() seccomp.Policy {
	type conds = seccomp.ArgumentConditions
	return seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Action: errno(unix.EPERM), Names: deniedEPERM},
			{Action: errno(unix.ENOSYS), Names: deniedENOSYS},
			// Netlink, packet, vsock, bluetooth, …: only unix, inet and inet6 sockets. And
			// only the protocols that Landlock's TCP rules cover or that carry no connection:
			// MPTCP and SCTP would connect around them. Protocol 1 is also PF_UNIX, which
			// unix sockets accept.
			{Action: errno(unix.EAFNOSUPPORT), NamesWithCondtions: []seccomp.NameWithConditions{
				{Name: "socket", Conditions: conds{
					{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_UNIX},
					{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_INET},
					{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_INET6},
				}},
				{Name: "socket", Conditions: conds{
					{Argument: 2, Operation: seccomp.NotEqual, Value: 0},
					{Argument: 2, Operation: seccomp.NotEqual, Value: unix.IPPROTO_TCP},
					{Argument: 2, Operation: seccomp.NotEqual, Value: unix.IPPROTO_UDP},
					{Argument: 2, Operation: seccomp.NotEqual, Value: unix.IPPROTO_ICMP},
					{Argument: 2, Operation: seccomp.NotEqual, Value: unix.IPPROTO_ICMPV6},
				}},
			}},
			// TCP Fast Open connects from sendto/sendmsg without passing Landlock's connect
			// check (landlock-lsm/linux#41); EOPNOTSUPP is what a kernel without client TFO
			// answers, and callers fall back to connect.
			{Action: errno(unix.EOPNOTSUPP), NamesWithCondtions: []seccomp.NameWithConditions{
				{Name: "sendto", Conditions: conds{{Argument: 3, Operation: seccomp.BitsSet, Value: unix.MSG_FASTOPEN}}},
				{Name: "sendmsg", Conditions: conds{{Argument: 2, Operation: seccomp.BitsSet, Value: unix.MSG_FASTOPEN}}},
				{Name: "sendmmsg", Conditions: conds{{Argument: 3, Operation: seccomp.BitsSet, Value: unix.MSG_FASTOPEN}}},
			}},
			{Action: errno(unix.EPERM), NamesWithCondtions: []seccomp.NameWithConditions{
				// Only the default persona: others switch off ASLR (ADDR_NO_RANDOMIZE) or make
				// data executable (READ_IMPLIES_EXEC).
				{Name: "personality", Conditions: conds{
					{Argument: 0, Operation: seccomp.NotEqual, Value: perLinux},
					{Argument: 0, Operation: seccomp.NotEqual, Value: personalityQuery32},
					{Argument: 0, Operation: seccomp.NotEqual, Value: personalityQuery64},
				}},
				{Name: "clone", Conditions: conds{{Argument: 0, Operation: seccomp.BitsSet, Value: cloneNewFlags}}},
				// Typing into the terminal's input queue, and the virtual console's
				// selection/paste: both drive whoever reads the terminal next.
				{Name: "ioctl", Conditions: low32Equal(1, unix.TIOCSTI)},
				{Name: "ioctl", Conditions: low32Equal(1, unix.TIOCLINUX)},
			}},
		},
	}
}

// low32Equal matches when the low 32 bits of argument arg equal v, whatever the high bits:
// the kernel reads an ioctl request as a 32-bit int, so 1<<32|TIOCSTI is TIOCSTI to it. The
// library compares all 64 bits, so the match is spelled as "no bit outside v is set" and "each
// bit of v is set", over the low word only.
func low32Equal(arg uint32, v uint32) seccomp.ArgumentConditions {
	conds := seccomp.ArgumentConditions{{Argument: arg, Operation: seccomp.BitsNotSet, Value: uint64(^v)}}
	for rest := v; rest != 0; rest &= rest - 1 {
		bit := uint64(1) << bits.TrailingZeros32(rest)
		conds = append(conds, seccomp.Condition{Argument: arg, Operation: seccomp.BitsSet, Value: bit})
	}
	return conds
}

// SeccompProgram returns the BPF program Apply installs: a check that kills the process on
// any syscall made through another architecture's or ABI's entry point (i386 int 0x80, x32),
// followed by SeccompPolicy assembled for this one. The guard comes first because the
// library's own arch check falls through to the default action, here allow.
func SeccompProgram() ([]bpf.Instruction, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, err
	}
	policy := SeccompPolicy()
	body, err := policy.Assemble()
	if err != nil {
		return nil, err
	}
	const (
		offNr   = 0 // offsetof(struct seccomp_data, nr)
		offArch = 4 // offsetof(struct seccomp_data, arch)
	)
	kill := bpf.RetConstant{Val: uint32(seccomp.ActionKillProcess)}
	guard := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		kill,
	}
	if info.ID == arch.X86_64.ID {
		guard = append(guard,
			bpf.LoadAbsolute{Off: offNr, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: uint32(arch.X32.SeccompMask), SkipFalse: 1},
			kill,
		)
	}
	return append(guard, body...), nil
}

// loadSeccomp installs SeccompProgram on every thread (TSYNC). It relies on no_new_privs,
// which the kernel requires of an unprivileged caller and which TSYNC copies to every thread.
func loadSeccomp() outcome {
	const step = "seccomp"
	prog, err := SeccompProgram()
	if err != nil {
		return stepFailed(step, fmt.Errorf("assembling the policy: %w", err))
	}
	if err := installFilter(prog); err != nil {
		return stepFailed(step, err)
	}
	mode, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
	if err != nil || mode != unix.SECCOMP_MODE_FILTER {
		return stepFailed(step, fmt.Errorf("filter loaded but PR_GET_SECCOMP says mode %d (%v)", mode, err))
	}
	// A syscall the filter answers itself, and that would succeed without it.
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err == nil {
		unix.Close(fd)
	}
	if err := wantDenied("a netlink socket", unix.EAFNOSUPPORT, err); err != nil {
		return stepFailed(step, err)
	}
	return stepOK(step, fmt.Sprintf("%d instructions on all threads; %d syscalls denied, clone/ioctl/personality/socket/send by argument",
		len(prog), len(deniedEPERM)+len(deniedENOSYS)))
}

// installFilter calls seccomp(2) itself rather than through the library: with TSYNC the
// kernel reports a thread it could not synchronise as a positive return value, not an errno,
// and the library treats that as success although no thread got the filter.
func installFilter(prog []bpf.Instruction) error {
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return fmt.Errorf("assembling BPF: %w", err)
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, ins := range raw {
		filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	tid, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC,
		uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(filter)
	switch {
	case e == unix.ENOSYS:
		return fmt.Errorf("kernel has no seccomp: %w", e)
	case e != 0:
		return fmt.Errorf("seccomp(SET_MODE_FILTER, TSYNC): %w", e)
	case tid != 0:
		return fmt.Errorf("seccomp: thread %d could not be synchronised, no filter installed", tid)
	}
	return nil
}
