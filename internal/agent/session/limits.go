package session

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

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

// limited makes l start through the trampoline, which sets RLIMIT_FSIZE fsize (0: leaves
// it) and, when l.execOnly is set, limits execution to those files, then execs what l
// would have.
func (l launch) limited(self string, fsize int64) launch {
	if l.err != nil || fsize <= 0 && l.execOnly == nil {
		return l
	}
	if self == "" {
		l.err = fmt.Errorf("the agent's own binary is unknown, so a gated command cannot be limited: %w", errdefs.ErrFailedPrecondition)
		return l
	}
	args := []string{"paddock-agent", LimitedExecFlag, strconv.FormatInt(max(fsize, 0), 10)}
	if l.execOnly != nil {
		args = append(append(args, execOnlyFlag, strconv.Itoa(len(l.execOnly))), l.execOnly...)
	}
	l.argv = append(append(args, l.path), l.argv...)
	l.path = self
	return l
}

// execOnlyFlag, after the trampoline's FSIZE, is followed by a count and that many files:
// the only files the command and everything it starts may execute (see RestrictExec).
const execOnlyFlag = "--exec-only"

// ExecLimited is the trampoline (args follow LimitedExecFlag: FSIZE [--exec-only N FILE…]
// PATH ARGV0 ARGS…): it sets RLIMIT_FSIZE, soft and hard (FSIZE 0 leaves it), limits what
// may be executed to the N files when given, and replaces itself with the command, keeping
// its environment. It returns only when it could not, with the exit code a shell would
// give (127 not found, 126 otherwise) and why.
func ExecLimited(args []string) (code int, err error) {
	if len(args) < 3 {
		return 126, fmt.Errorf("%s: want FSIZE [%s N FILE…] PATH ARGV0 [ARGS…]", LimitedExecFlag, execOnlyFlag)
	}
	n, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || n < 0 {
		return 126, fmt.Errorf("%s: file size %q is not a byte count", LimitedExecFlag, args[0])
	}
	args = args[1:]
	var only []string
	if args[0] == execOnlyFlag {
		k, err := strconv.Atoi(args[1])
		if err != nil || k < 0 || len(args) < k+4 {
			return 126, fmt.Errorf("%s: %s %q: want a count of the files that follow", LimitedExecFlag, execOnlyFlag, args[1])
		}
		only, args = args[2:2+k], args[2+k:]
		if only == nil {
			only = []string{}
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
