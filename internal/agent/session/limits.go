package session

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// LimitedExecFlag, as argv[1] of the agent's own binary, makes it the trampoline that
// starts a command under the sandbox's file size limit:
//
//	paddock-agent --exec-limited FSIZE PATH ARGV0 ARGS…
//
// The agent's main hands such a command line to [ExecLimited] before anything else.
const LimitedExecFlag = "--exec-limited"

// LimitFileSize makes every command started after it (main, sessions, execs) run under
// RLIMIT_FSIZE n bytes, soft and hard, so that it cannot raise it again: a write past n
// fails with EFBIG and SIGXFSZ ends the process that made it.
//
// Why a trampoline: rlimits belong to a process, and Go's fork and exec offer no hook in
// the child before exec. Setting the limit on the agent around the fork would hold it,
// for that moment, on the agent's own writes (the history store, the file API) too, and
// setting it on the child after start (prlimit) lets the command run a moment without
// it. So the child execs self, the agent's own binary, with LimitedExecFlag; that sets
// the limit and execs the command in the same process, which therefore never runs a
// single instruction unlimited. The session's PID, process group, terminal, credentials
// and parent-death signal are the command's, as without the limit.
func (m *Manager) LimitFileSize(n int64, self string) error {
	if n <= 0 {
		return fmt.Errorf("file size limit %d: must be positive: %w", n, errdefs.ErrInvalidArgument)
	}
	if !filepath.IsAbs(self) {
		return fmt.Errorf("file size limit: the agent's binary %q is not an absolute path: %w", self, errdefs.ErrInvalidArgument)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fileSize, m.self = n, self
	return nil
}

// SetSelf names the agent's own binary, the trampoline that starts gated commands
// (Spec.ExecOnly) and commands under a file size limit.
func (m *Manager) SetSelf(self string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.self = self
}

// limited makes l start through the trampoline, which joins the command's cgroup (when
// l has one), takes the sandbox user's ids (when cred is set and l has a cgroup: the join
// must come first, as the agent), sets RLIMIT_FSIZE fsize (0: leaves it), limits
// execution to l.execOnly when set, then execs what l would have.
func (l launch) limited(self string, fsize int64, cred *syscall.Credential) launch {
	if l.err != nil || fsize <= 0 && l.execOnly == nil && len(l.cgroup) == 0 {
		return l
	}
	if self == "" {
		l.err = fmt.Errorf("the agent's own binary is unknown, so the command cannot be limited: %w", errdefs.ErrFailedPrecondition)
		return l
	}
	args := []string{"paddock-agent", LimitedExecFlag, strconv.FormatInt(max(fsize, 0), 10)}
	if len(l.cgroup) > 0 {
		args = append(args, cgroupFlag, strconv.Itoa(len(l.cgroup)))
		if cred != nil {
			args = append(args, asFlag, strconv.FormatUint(uint64(cred.Uid), 10), strconv.FormatUint(uint64(cred.Gid), 10))
			l.asSelf = true
		}
	}
	if l.execOnly != nil {
		args = append(append(args, execOnlyFlag, strconv.Itoa(len(l.execOnly))), l.execOnly...)
	}
	l.argv = append(append(args, l.path), l.argv...)
	l.path = self
	return l
}

// Flags of the trampoline, after FSIZE and before PATH.
const (
	// execOnlyFlag is followed by a count and that many files: the only files the command
	// and everything it starts may execute (see RestrictExec).
	execOnlyFlag = "--exec-only"
	// cgroupFlag is followed by a count K: descriptors 3 to 3+K-1 are cgroup.procs files
	// of the command's own cgroup, which the trampoline joins.
	cgroupFlag = "--cgroup"
	// asFlag is followed by a uid and a gid, which the trampoline takes (with that group
	// only) after joining its cgroup.
	asFlag = "--as"
)

// ExecLimited is the trampoline (args follow LimitedExecFlag: FSIZE [--cgroup K [--as UID
// GID]] [--exec-only N FILE…] PATH ARGV0 ARGS…): it joins the cgroup it is handed, takes
// the user's ids, sets RLIMIT_FSIZE, soft and hard (FSIZE 0 leaves it), limits what may
// be executed to the N files when given, and replaces itself with the command, keeping
// its environment. It returns only when it could not, with the exit code a shell would
// give (127 not found, 126 otherwise) and why.
func ExecLimited(args []string) (code int, err error) {
	const usage = "want FSIZE [--cgroup K [--as UID GID]] [--exec-only N FILE…] PATH ARGV0 [ARGS…]"
	if len(args) < 3 {
		return 126, fmt.Errorf("%s: %s", LimitedExecFlag, usage)
	}
	n, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || n < 0 {
		return 126, fmt.Errorf("%s: file size %q is not a byte count", LimitedExecFlag, args[0])
	}
	args = args[1:]
	var only []string
	var groups []*os.File
	var cred *syscall.Credential
	for len(args) > 2 && strings.HasPrefix(args[0], "--") {
		switch args[0] {
		case cgroupFlag:
			k, err := strconv.Atoi(args[1])
			if err != nil || k < 1 || k > 8 {
				return 126, fmt.Errorf("%s: %s %q: want a count of descriptors", LimitedExecFlag, cgroupFlag, args[1])
			}
			for i := range k {
				groups = append(groups, os.NewFile(uintptr(3+i), "cgroup.procs"))
			}
			args = args[2:]
		case asFlag:
			if len(args) < 5 {
				return 126, fmt.Errorf("%s: %s", LimitedExecFlag, usage)
			}
			uid, uerr := strconv.ParseUint(args[1], 10, 32)
			gid, gerr := strconv.ParseUint(args[2], 10, 32)
			if uerr != nil || gerr != nil || uid == 0 || gid == 0 {
				return 126, fmt.Errorf("%s: %s %q %q: want a uid and a gid, not root's", LimitedExecFlag, asFlag, args[1], args[2])
			}
			cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
			args = args[3:]
		case execOnlyFlag:
			k, err := strconv.Atoi(args[1])
			if err != nil || k < 0 || len(args) < k+4 {
				return 126, fmt.Errorf("%s: %s %q: want a count of the files that follow", LimitedExecFlag, execOnlyFlag, args[1])
			}
			only, args = args[2:2+k], args[2+k:]
			if only == nil {
				only = []string{}
			}
		default:
			return 126, fmt.Errorf("%s: unknown flag %q: %s", LimitedExecFlag, args[0], usage)
		}
	}
	if len(args) < 2 {
		return 126, fmt.Errorf("%s: %s", LimitedExecFlag, usage)
	}
	if err := cgroups.JoinFiles(groups); err != nil {
		return 126, err
	}
	if cred != nil {
		if err := become(cred); err != nil {
			return 126, err
		}
	}
	if n > 0 {
		if err := limitFileSize(uint64(n)); err != nil {
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

func limitFileSize(n uint64) error {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &lim); err != nil {
		return fmt.Errorf("read RLIMIT_FSIZE: %w", err)
	}
	// Never above a hard limit already lower: only a privileged process may raise it.
	v := min(n, lim.Max)
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: v, Max: v}); err != nil {
		return fmt.Errorf("set RLIMIT_FSIZE to %d: %w", v, err)
	}
	return nil
}

// UseCgroup makes every later command run in a cgroup of its own below g (the commands'
// group the host gave the agent). A command's group ends with it: what it left running is
// killed when its process exits, wherever it went (a new session, a double fork), except
// for the main command's, the sandbox's service. The agent must be allowed to join it,
// which it does in the trampoline before taking the command's ids.
func (m *Manager) UseCgroup(g *cgroups.Group) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cgroup = g
}

// commandGroup makes the cgroup of session id and opens its cgroup.procs files; with an
// error (logged) the command runs without one, in the commands' group.
func (m *Manager) commandGroup(id string) (*cgroups.Group, []*os.File) {
	m.cgroupSeq++
	g, fs, err := m.cgroup.Command(id + "." + strconv.Itoa(m.cgroupSeq))
	if err != nil {
		m.log.Warn("a command's own cgroup", "session", id, "err", err)
		return nil, nil
	}
	return g, fs
}
