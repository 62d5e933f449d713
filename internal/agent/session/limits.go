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

// limited makes l start through the trampoline, which sets RLIMIT_FSIZE fsize and execs
// what l would have.
func (l launch) limited(self string, fsize int64) launch {
	if l.err != nil || fsize <= 0 {
		return l
	}
	l.argv = append([]string{"paddock-agent", LimitedExecFlag, strconv.FormatInt(fsize, 10), l.path}, l.argv...)
	l.path = self
	return l
}

// ExecLimited is the trampoline (args follow LimitedExecFlag: FSIZE PATH ARGV0 ARGS…): it
// sets RLIMIT_FSIZE, soft and hard, and replaces itself with the command, keeping its
// environment. It returns only when it could not, with the exit code a shell would give
// (127 not found, 126 otherwise) and why.
func ExecLimited(args []string) (code int, err error) {
	if len(args) < 3 {
		return 126, fmt.Errorf("%s: want FSIZE PATH ARGV0 [ARGS…]", LimitedExecFlag)
	}
	n, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || n <= 0 {
		return 126, fmt.Errorf("%s: file size %q is not a positive byte count", LimitedExecFlag, args[0])
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &lim); err != nil {
		return 126, fmt.Errorf("read RLIMIT_FSIZE: %w", err)
	}
	// Never above a hard limit already lower: only a privileged process may raise it.
	v := min(uint64(n), lim.Max)
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: v, Max: v}); err != nil {
		return 126, fmt.Errorf("set RLIMIT_FSIZE to %d: %w", v, err)
	}
	err = syscall.Exec(args[1], args[2:], os.Environ())
	if errors.Is(err, syscall.ENOENT) {
		return 127, fmt.Errorf("%s: %w", args[1], err)
	}
	return 126, fmt.Errorf("%s: %w", args[1], err)
}
