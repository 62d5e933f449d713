// Package trampoline is what paddock-agent starts a command through when the command must
// be limited before its first instruction: it joins the command's own cgroup (as the
// agent), takes the sandbox user's ids, sets RLIMIT_FSIZE, limits what may be executed
// (Landlock), then execs the command in the same process, which therefore never runs a
// single instruction outside those limits. Go's fork and exec offer no hook in the child
// before exec, hence a process of its own.
//
// It runs in the binary paddock-exec (small, so that an exec pays little for it), or in
// paddock-agent itself where paddock-exec is not installed. It imports nothing that
// registers at start (no gRPC, no protobuf), for the same reason.
package trampoline

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Flag, as argv[1], makes paddock-agent (or paddock-exec) the trampoline:
//
//	paddock-exec --exec-limited FSIZE [--cgroup K] [--root DIR] [--as UID GID] [--exec-only N FILE…] PATH ARGV0 ARGS…
const Flag = "--exec-limited"

// Flags of the trampoline, after FSIZE and before PATH.
const (
	// ExecOnlyFlag is followed by a count and that many files: the only files the command
	// and everything it starts may execute (see RestrictExec).
	ExecOnlyFlag = "--exec-only"
	// CgroupFlag is followed by a count K: descriptors 3 to 3+K-1 are cgroup.procs files
	// of the command's own cgroup, which the trampoline joins.
	CgroupFlag = "--cgroup"
	// AsFlag is followed by a uid and a gid, which the trampoline takes (with that group
	// only) after joining its cgroup.
	AsFlag = "--as"
	// RootFlag is followed by a directory the trampoline chroots to, as the agent, before
	// it takes the user's ids: the gated root, whose writable places are noexec.
	RootFlag = "--root"
	// NprocFlag is followed by a count the trampoline sets RLIMIT_NPROC to, soft and
	// hard, after it takes the user's ids.
	NprocFlag = "--nproc"
)

// Exec is the trampoline (args follow Flag: FSIZE [--cgroup K [--as UID
// GID]] [--nproc N] [--exec-only N FILE…] PATH ARGV0 ARGS…): it joins the cgroup it is
// handed, takes the user's ids, sets RLIMIT_FSIZE, soft and hard (FSIZE 0 leaves it), and
// RLIMIT_NPROC when given, limits what may
// be executed to the N files when given, and replaces itself with the command, keeping
// its environment. It returns only when it could not, with the exit code a shell would
// give (127 not found, 126 otherwise) and why.
func Exec(args []string) (code int, err error) {
	const usage = "want FSIZE [--cgroup K] [--root DIR] [--as UID GID] [--nproc N] [--exec-only N FILE…] PATH ARGV0 [ARGS…]"
	if len(args) < 3 {
		return 126, fmt.Errorf("%s: %s", Flag, usage)
	}
	n, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || n < 0 {
		return 126, fmt.Errorf("%s: file size %q is not a byte count", Flag, args[0])
	}
	args = args[1:]
	var only []string
	var groups []*os.File
	var root string
	var cred *syscall.Credential
	var nproc uint64
	for len(args) > 2 && strings.HasPrefix(args[0], "--") {
		switch args[0] {
		case CgroupFlag:
			k, err := strconv.Atoi(args[1])
			if err != nil || k < 1 || k > 8 {
				return 126, fmt.Errorf("%s: %s %q: want a count of descriptors", Flag, CgroupFlag, args[1])
			}
			for i := range k {
				groups = append(groups, os.NewFile(uintptr(3+i), "cgroup.procs"))
			}
			args = args[2:]
		case RootFlag:
			root, args = args[1], args[2:]
		case AsFlag:
			if len(args) < 5 {
				return 126, fmt.Errorf("%s: %s", Flag, usage)
			}
			uid, uerr := strconv.ParseUint(args[1], 10, 32)
			gid, gerr := strconv.ParseUint(args[2], 10, 32)
			if uerr != nil || gerr != nil || uid == 0 || gid == 0 {
				return 126, fmt.Errorf("%s: %s %q %q: want a uid and a gid, not root's", Flag, AsFlag, args[1], args[2])
			}
			cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
			args = args[3:]
		case NprocFlag:
			v, err := strconv.ParseUint(args[1], 10, 64)
			if err != nil || v == 0 {
				return 126, fmt.Errorf("%s: %s %q: want a positive count of processes", Flag, NprocFlag, args[1])
			}
			nproc, args = v, args[2:]
		case ExecOnlyFlag:
			k, err := strconv.Atoi(args[1])
			if err != nil || k < 0 || len(args) < k+4 {
				return 126, fmt.Errorf("%s: %s %q: want a count of the files that follow", Flag, ExecOnlyFlag, args[1])
			}
			only, args = args[2:2+k], args[2+k:]
			if only == nil {
				only = []string{}
			}
		default:
			return 126, fmt.Errorf("%s: unknown flag %q: %s", Flag, args[0], usage)
		}
	}
	if len(args) < 2 {
		return 126, fmt.Errorf("%s: %s", Flag, usage)
	}
	if err := join(groups); err != nil {
		return 126, err
	}
	if root != "" {
		if err := chroot(root); err != nil {
			return 126, err
		}
	}
	if cred != nil {
		if err := become(cred); err != nil {
			return 126, err
		}
	}
	if n > 0 {
		if err := lower(unix.RLIMIT_FSIZE, "RLIMIT_FSIZE", uint64(n)); err != nil {
			return 126, err
		}
	}
	if nproc > 0 {
		if err := lower(unix.RLIMIT_NPROC, "RLIMIT_NPROC", nproc); err != nil {
			return 126, err
		}
	}
	if only != nil {
		if err := RestrictExec(only); err != nil {
			return 126, err
		}
	}
	err = syscall.Exec(args[0], args[1:], os.Environ())
	if errors.Is(err, syscall.ENOENT) {
		return 127, fmt.Errorf("%s: %w", args[0], err)
	}
	return 126, fmt.Errorf("%s: %w", args[0], err)
}

// become takes cred's uid and gid, with that group only, as Go's fork does for a
// SysProcAttr.Credential; the change of ids clears the parent-death signal, which is set
// again.
func become(cred *syscall.Credential) error {
	if err := syscall.Setgroups([]int{int(cred.Gid)}); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setresgid(int(cred.Gid), int(cred.Gid), int(cred.Gid)); err != nil {
		return fmt.Errorf("setresgid %d: %w", cred.Gid, err)
	}
	if err := syscall.Setresuid(int(cred.Uid), int(cred.Uid), int(cred.Uid)); err != nil {
		return fmt.Errorf("setresuid %d: %w", cred.Uid, err)
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("parent-death signal: %w", err)
	}
	return nil
}

// lower sets rlimit res (named name) to n, soft and hard.
func lower(res int, name string, n uint64) error {
	var lim unix.Rlimit
	if err := unix.Getrlimit(res, &lim); err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	// Never above a hard limit already lower: only a privileged process may raise it.
	v := min(n, lim.Max)
	if err := unix.Setrlimit(res, &unix.Rlimit{Cur: v, Max: v}); err != nil {
		return fmt.Errorf("set %s to %d: %w", name, v, err)
	}
	return nil
}

// RestrictExec limits the calling process, and everything it starts, to executing the
// given files.
func RestrictExec(files []string) error {
	cfg, err := landlock.NewConfig(execAccess)
	if err != nil {
		return fmt.Errorf("landlock: %w", err)
	}
	rules := make([]landlock.Rule, 0, len(files))
	for _, f := range files {
		rules = append(rules, landlock.PathAccess(execAccess, f))
	}
	if err := cfg.RestrictPaths(rules...); err != nil {
		return fmt.Errorf("landlock: limit execution to %d files: %w", len(files), err)
	}
	return nil
}

// chroot makes dir the process's root, and its working directory the same path there.
func chroot(dir string) error {
	cwd, err := os.Getwd()
	if err != nil {
		cwd = "/"
	}
	if err := unix.Chroot(dir); err != nil {
		return fmt.Errorf("chroot %s: %w", dir, err)
	}
	if err := unix.Chdir(cwd); err != nil {
		return fmt.Errorf("working directory %s in %s: %w", cwd, dir, err)
	}
	return nil
}

// join moves the calling process into the cgroup of each of fds (cgroup.procs files
// opened for writing by the agent) and closes them.
func join(fds []*os.File) error {
	for _, f := range fds {
		_, err := f.WriteString("0")
		f.Close()
		if err != nil {
			return fmt.Errorf("join the command's cgroup: %w", err)
		}
	}
	return nil
}

// execAccess is Landlock's execute right alone: nothing else is restricted.
var execAccess = landlock.AccessFSSet(llsys.AccessFSExecute)
