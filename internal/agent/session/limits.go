package session

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/paddockhq/paddock/internal/agent/trampoline"
	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// LimitedExecFlag, as argv[1] of the agent's own binary, makes it the trampoline that
// starts a command under the sandbox's file size limit:
//
//	paddock-agent --exec-limited FSIZE PATH ARGV0 ARGS…
//
// The agent's main hands such a command line to [ExecLimited] before anything else.
const LimitedExecFlag = trampoline.Flag

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
// and parent-death signal are the command's, as without the limit. A trampoline named
// before by SetSelf (paddock-exec) stays: self is used only when none was.
func (m *Manager) LimitFileSize(n int64, self string) error {
	if n <= 0 {
		return fmt.Errorf("file size limit %d: must be positive: %w", n, errdefs.ErrInvalidArgument)
	}
	if !filepath.IsAbs(self) {
		return fmt.Errorf("file size limit: the agent's binary %q is not an absolute path: %w", self, errdefs.ErrInvalidArgument)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fileSize = n
	if m.self == "" {
		m.self = self
	}
	return nil
}

// LimitProcesses makes every command started after it run under RLIMIT_NPROC n, soft and
// hard, set by the trampoline (SetSelf) as LimitFileSize's limit is. The kernel counts it per
// user, threads included; commands run as a user of their own, which cannot raise it.
func (m *Manager) LimitProcesses(n int64) error {
	if n <= 0 {
		return fmt.Errorf("process limit %d: must be positive: %w", n, errdefs.ErrInvalidArgument)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.nproc = n
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
// must come first, as the agent), sets RLIMIT_FSIZE fsize and RLIMIT_NPROC nproc (0:
// leaves it), limits execution to l.execOnly when set, then execs what l would have.
func (l launch) limited(self string, fsize, nproc int64, cred *syscall.Credential) launch {
	if l.err != nil || fsize <= 0 && nproc <= 0 && l.execOnly == nil && len(l.cgroup) == 0 && l.root == "" {
		return l
	}
	if self == "" {
		l.err = fmt.Errorf("the agent's own binary is unknown, so the command cannot be limited: %w", errdefs.ErrFailedPrecondition)
		return l
	}
	args := []string{"paddock-agent", LimitedExecFlag, strconv.FormatInt(max(fsize, 0), 10)}
	if len(l.cgroup) > 0 {
		args = append(args, trampoline.CgroupFlag, strconv.Itoa(len(l.cgroup)))
	}
	if l.root != "" {
		args = append(args, trampoline.RootFlag, l.root)
	}
	if cred != nil && (len(l.cgroup) > 0 || l.root != "") {
		// Joining a cgroup and chrooting are the agent's to do: the ids come after.
		args = append(args, trampoline.AsFlag, strconv.FormatUint(uint64(cred.Uid), 10), strconv.FormatUint(uint64(cred.Gid), 10))
		l.asSelf = true
	}
	if nproc > 0 {
		args = append(args, trampoline.NprocFlag, strconv.FormatInt(nproc, 10))
	}
	if l.execOnly != nil {
		args = append(append(args, trampoline.ExecOnlyFlag, strconv.Itoa(len(l.execOnly))), l.execOnly...)
	}
	l.argv = append(append(args, l.path), l.argv...)
	l.path = self
	return l
}

// ExecLimited is the trampoline (package trampoline), for the agent's main and tests.
func ExecLimited(args []string) (code int, err error) { return trampoline.Exec(args) }

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
