//go:build linux

package harden

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"testing"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// seccompData builds the kernel's struct seccomp_data for the BPF interpreter of x/net/bpf,
// which loads 32-bit words big-endian: each word is written big-endian at the offset the
// kernel's little-endian layout gives it, so the filter reads the values the kernel would.
func seccompData(auditArch, nr uint32, args ...uint64) []byte {
	in := make([]byte, 64)
	binary.BigEndian.PutUint32(in[0:], nr)
	binary.BigEndian.PutUint32(in[4:], auditArch)
	for i, a := range args {
		binary.BigEndian.PutUint32(in[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(in[20+8*i:], uint32(a>>32))
	}
	return in
}

func actionName(ret uint32) string {
	switch seccomp.Action(ret & unix.SECCOMP_RET_ACTION_FULL) {
	case seccomp.ActionAllow:
		return "allow"
	case seccomp.ActionKillProcess:
		return "kill"
	case seccomp.ActionErrno:
		return unix.ErrnoName(unix.Errno(ret & unix.SECCOMP_RET_DATA))
	}
	return fmt.Sprintf("action %#x", ret)
}

// TestSeccompProgram runs the assembled program in a BPF interpreter over (syscall, args)
// and checks the action, including several groups in one policy, where go-seccomp-bpf
// v1.5.0 failed open.
func TestSeccompProgram(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("the table uses x86_64 syscall numbers; GOARCH is %s", runtime.GOARCH)
	}
	prog, err := SeccompProgram()
	if err != nil {
		t.Fatal(err)
	}
	eopnotsupp := unix.ErrnoName(unix.EOPNOTSUPP) // "ENOTSUP": the same number on Linux
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	const (
		x86_64 = uint32(unix.AUDIT_ARCH_X86_64)
		high   = uint64(1) << 32
		// From <linux/personality.h>; x/sys/unix does not have them, nor FIONREAD.
		addrNoRandomize = 0x0040000
		readImpliesExec = 0x0400000
		fionread        = 0x541b
		thread          = unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD |
			unix.CLONE_SYSVSEM | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID
	)
	tests := []struct {
		name string
		arch uint32
		nr   uint32
		args []uint64
		want string
	}{
		{"read", x86_64, unix.SYS_READ, nil, "allow"},
		{"getpid", x86_64, unix.SYS_GETPID, nil, "allow"},
		{"ptrace", x86_64, unix.SYS_PTRACE, []uint64{unix.PTRACE_TRACEME}, "EPERM"},
		{"process_vm_readv", x86_64, unix.SYS_PROCESS_VM_READV, nil, "EPERM"},
		{"pidfd_getfd", x86_64, unix.SYS_PIDFD_GETFD, nil, "EPERM"},
		{"keyctl", x86_64, unix.SYS_KEYCTL, nil, "EPERM"},
		{"bpf", x86_64, unix.SYS_BPF, nil, "EPERM"},
		{"perf_event_open", x86_64, unix.SYS_PERF_EVENT_OPEN, nil, "EPERM"},
		{"userfaultfd", x86_64, unix.SYS_USERFAULTFD, nil, "EPERM"},
		{"init_module", x86_64, unix.SYS_INIT_MODULE, nil, "EPERM"},
		{"mount", x86_64, unix.SYS_MOUNT, nil, "EPERM"},
		{"fsopen", x86_64, unix.SYS_FSOPEN, nil, "EPERM"},
		{"unshare", x86_64, unix.SYS_UNSHARE, []uint64{unix.CLONE_NEWUSER}, "EPERM"},
		{"unshare files", x86_64, unix.SYS_UNSHARE, []uint64{unix.CLONE_FILES}, "EPERM"},
		{"setns", x86_64, unix.SYS_SETNS, nil, "EPERM"},
		{"open_by_handle_at", x86_64, unix.SYS_OPEN_BY_HANDLE_AT, nil, "EPERM"},
		{"io_uring_setup", x86_64, unix.SYS_IO_URING_SETUP, nil, "ENOSYS"},
		{"io_uring_enter", x86_64, unix.SYS_IO_URING_ENTER, nil, "ENOSYS"},
		{"clone3", x86_64, unix.SYS_CLONE3, nil, "ENOSYS"},
		{"clone thread", x86_64, unix.SYS_CLONE, []uint64{thread}, "allow"},
		{"clone fork", x86_64, unix.SYS_CLONE, []uint64{uint64(unix.SIGCHLD)}, "allow"},
		{"clone vfork", x86_64, unix.SYS_CLONE, []uint64{unix.CLONE_VM | unix.CLONE_VFORK | uint64(unix.SIGCHLD)}, "allow"},
		{"clone newuser", x86_64, unix.SYS_CLONE, []uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}, "EPERM"},
		{"clone newnet", x86_64, unix.SYS_CLONE, []uint64{unix.CLONE_NEWNET}, "EPERM"},
		{"clone newns", x86_64, unix.SYS_CLONE, []uint64{unix.CLONE_NEWNS}, "EPERM"},
		{"clone newpid high bits", x86_64, unix.SYS_CLONE, []uint64{high | unix.CLONE_NEWPID}, "EPERM"},
		// A failed argument check leaves an argument where the syscall number was (see
		// SeccompPolicy): none of these may then match a later rule.
		{"ioctl request 41 (socket's number)", x86_64, unix.SYS_IOCTL, []uint64{3, unix.SYS_SOCKET}, "allow"},
		{"ioctl request 56 (clone's number)", x86_64, unix.SYS_IOCTL, []uint64{0x20000, unix.SYS_CLONE}, "allow"},
		{"clone exit signal 16 (ioctl's number)", x86_64, unix.SYS_CLONE, []uint64{unix.SYS_IOCTL}, "allow"},
		{"clone exit signal 135 (personality's number)", x86_64, unix.SYS_CLONE, []uint64{unix.SYS_PERSONALITY}, "allow"},
		{"socket inet protocol 16", x86_64, unix.SYS_SOCKET, []uint64{unix.AF_INET, unix.SOCK_STREAM, 16}, "EAFNOSUPPORT"},
		{"socket unix", x86_64, unix.SYS_SOCKET, []uint64{unix.AF_UNIX, unix.SOCK_STREAM, 0}, "allow"},
		{"socket unix PF_UNIX", x86_64, unix.SYS_SOCKET, []uint64{unix.AF_UNIX, unix.SOCK_DGRAM, unix.AF_UNIX}, "allow"},
		{"socket inet", x86_64, unix.SYS_SOCKET, []uint64{unix.AF_INET, unix.SOCK_STREAM | unix.SOCK_CLOEXEC, 0}, "allow"},
		{"socket inet tcp", x86_64, unix.SYS_SOCKET, []uint64{unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_TCP}, "allow"},
		{"socket inet6 udp", x86_64, unix.SYS_SOCKET, []uint64{unix.AF_INET6, unix.SOCK_DGRAM, unix.IPPROTO_UDP}, "allow"},
		{"socket netlink", x86_64, unix.SYS_SOCKET, []uint64{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE}, "EAFNOSUPPORT"},
		{"socket packet", x86_64, unix.SYS_SOCKET, []uint64{unix.AF_PACKET, unix.SOCK_RAW, 0}, "EAFNOSUPPORT"},
		{"socket vsock", x86_64, unix.SYS_SOCKET, []uint64{unix.AF_VSOCK, unix.SOCK_STREAM, 0}, "EAFNOSUPPORT"},
		{"socket bluetooth", x86_64, unix.SYS_SOCKET, []uint64{unix.AF_BLUETOOTH, unix.SOCK_STREAM, 0}, "EAFNOSUPPORT"},
		{"socket unix high bits", x86_64, unix.SYS_SOCKET, []uint64{high | unix.AF_UNIX, unix.SOCK_STREAM, 0}, "EAFNOSUPPORT"},
		{"socket mptcp", x86_64, unix.SYS_SOCKET, []uint64{unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP}, "EAFNOSUPPORT"},
		{"socket sctp", x86_64, unix.SYS_SOCKET, []uint64{unix.AF_INET6, unix.SOCK_STREAM, unix.IPPROTO_SCTP}, "EAFNOSUPPORT"},
		{"sendto fast open", x86_64, unix.SYS_SENDTO, []uint64{3, 0, 1, unix.MSG_FASTOPEN | unix.MSG_NOSIGNAL}, eopnotsupp},
		{"sendto fast open bit 32", x86_64, unix.SYS_SENDTO, []uint64{3, 0, 1, high | unix.MSG_FASTOPEN}, eopnotsupp},
		{"sendto", x86_64, unix.SYS_SENDTO, []uint64{3, 0, 1, unix.MSG_NOSIGNAL}, "allow"},
		{"sendmsg fast open", x86_64, unix.SYS_SENDMSG, []uint64{3, 0, unix.MSG_FASTOPEN}, eopnotsupp},
		{"sendmsg", x86_64, unix.SYS_SENDMSG, []uint64{3, 0, unix.MSG_DONTWAIT}, "allow"},
		{"sendmmsg fast open", x86_64, unix.SYS_SENDMMSG, []uint64{3, 0, 1, unix.MSG_FASTOPEN}, eopnotsupp},
		{"sendmmsg", x86_64, unix.SYS_SENDMMSG, []uint64{3, 0, 1, 0}, "allow"},
		{"ioctl TIOCSTI", x86_64, unix.SYS_IOCTL, []uint64{0, unix.TIOCSTI}, "EPERM"},
		{"ioctl TIOCSTI bit 32", x86_64, unix.SYS_IOCTL, []uint64{0, high | unix.TIOCSTI}, "EPERM"},
		{"ioctl TIOCSTI high word set", x86_64, unix.SYS_IOCTL, []uint64{0, 0xffffffff00000000 | unix.TIOCSTI}, "EPERM"},
		{"ioctl TIOCLINUX", x86_64, unix.SYS_IOCTL, []uint64{0, unix.TIOCLINUX}, "EPERM"},
		{"ioctl TIOCLINUX bit 32", x86_64, unix.SYS_IOCTL, []uint64{0, high | unix.TIOCLINUX}, "EPERM"},
		{"ioctl TCGETS", x86_64, unix.SYS_IOCTL, []uint64{0, unix.TCGETS}, "allow"},
		{"ioctl TIOCGWINSZ", x86_64, unix.SYS_IOCTL, []uint64{0, unix.TIOCGWINSZ}, "allow"},
		{"ioctl FIONREAD", x86_64, unix.SYS_IOCTL, []uint64{0, fionread}, "allow"},
		{"ioctl TIOCSTI plus a bit", x86_64, unix.SYS_IOCTL, []uint64{0, unix.TIOCSTI | 0x10000}, "allow"},
		{"personality default", x86_64, unix.SYS_PERSONALITY, []uint64{0}, "allow"},
		{"personality query", x86_64, unix.SYS_PERSONALITY, []uint64{0xffffffff}, "allow"},
		{"personality query sign-extended", x86_64, unix.SYS_PERSONALITY, []uint64{^uint64(0)}, "allow"},
		{"personality no ASLR", x86_64, unix.SYS_PERSONALITY, []uint64{addrNoRandomize}, "EPERM"},
		{"personality READ_IMPLIES_EXEC", x86_64, unix.SYS_PERSONALITY, []uint64{readImpliesExec}, "EPERM"},
		{"personality high bits", x86_64, unix.SYS_PERSONALITY, []uint64{high}, "EPERM"},
		{"i386 entry point", unix.AUDIT_ARCH_I386, 3, nil, "kill"},
		{"aarch64", unix.AUDIT_ARCH_AARCH64, 63, nil, "kill"},
		{"x32 read", x86_64, uint32(arch.X32.SeccompMask) | unix.SYS_READ, nil, "kill"},
		{"x32 ptrace", x86_64, uint32(arch.X32.SeccompMask) | 521, nil, "kill"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ret, err := vm.Run(seccompData(tt.arch, tt.nr, tt.args...))
			if err != nil {
				t.Fatal(err)
			}
			if got := actionName(uint32(ret)); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

// TestSeccompPolicyNames checks that every name in the deny lists is one the library knows
// for this architecture, so assembly cannot fail on the host the agent runs on.
func TestSeccompPolicyNames(t *testing.T) {
	info, err := arch.GetInfo("")
	if err != nil {
		t.Skipf("go-seccomp-bpf has no syscall table for %s", runtime.GOARCH)
	}
	for _, name := range append(append([]string{}, deniedEPERM...), deniedENOSYS...) {
		if _, ok := info.SyscallNames[name]; !ok {
			t.Errorf("%s: unknown on %s", name, info.Name)
		}
	}
}

// TestSeccompPolicyShape guards the two rules SeccompPolicy's comment gives for working
// around go-seccomp-bpf's unreloaded syscall number.
func TestSeccompPolicyShape(t *testing.T) {
	seen := map[string]int{}
	conditional := false
	for i, g := range SeccompPolicy().Syscalls {
		names := append([]string{}, g.Names...)
		for _, nc := range g.NamesWithCondtions {
			if !slices.Contains(names, nc.Name) {
				names = append(names, nc.Name)
			}
		}
		if len(g.Names) > 0 && conditional {
			t.Errorf("group %d has plain names after a group with argument checks", i)
		}
		conditional = conditional || len(g.NamesWithCondtions) > 0
		for _, n := range names {
			if j, ok := seen[n]; ok {
				t.Errorf("%s is in groups %d and %d", n, j, i)
			}
			seen[n] = i
		}
	}
}

func TestLow32Equal(t *testing.T) {
	conds := low32Equal(1, unix.TIOCSTI)
	// One "no other bit" condition, then one per set bit of 0x5412.
	if want := 1 + 5; len(conds) != want {
		t.Fatalf("got %d conditions, want %d: %+v", len(conds), want, conds)
	}
	if conds[0].Operation != seccomp.BitsNotSet || conds[0].Value != 0xffffabed {
		t.Errorf("first condition %+v, want BitsNotSet 0xffffabed", conds[0])
	}
}
