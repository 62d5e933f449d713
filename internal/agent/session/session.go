// Package session runs the commands of a sandbox: the main command and every session a
// client starts. It is the heart of paddock-agent.
//
// Each session has its own process group (or terminal session, with a PTY), its stdout and
// stderr kept apart in one ordered log (see outputLog), stdin a client can write and close,
// and an exit status. Clients may detach and re-attach; the log replays what it still holds.
//
// The agent may run as PID 1 (in a container or microVM), and it is a child subreaper in the
// process tier, so orphans of any session reparent to it. One reaper collects every child
// with wait4(-1), and the Manager's lock is held across fork so that a child cannot be reaped
// before it is registered.
package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/errdefs"
)

const (
	// logCapacity bounds each session's held output.
	logCapacity = 4 << 20
	// readSize is the most one pipe read takes; pipes are grown to this size too, so a fast
	// writer moves a quarter of a megabyte per wake-up.
	readSize = 1 << 20
	// firstReadSize is a pump's first buffer, which each read that fills it doubles up to
	// readSize: a quiet session (a shell, a server's log) holds this much, not readSize.
	firstReadSize = 32 << 10
	// drainIdle is how long output may pause, after the session's process has exited,
	// before the session is considered finished even though a background child still holds
	// the pipe open.
	drainIdle = 100 * time.Millisecond
	// keepExited is how many exited sessions List still reports, and keepOutput how much of
	// its output each keeps for replay: at most 16 MiB of the sandbox's memory in all.
	keepExited = 64
	keepOutput = 256 << 10
)

// Size is a terminal size.
type Size struct{ Rows, Cols uint16 }

// Spec describes a session to start.
type Spec struct {
	// ID names the session; empty picks the next deterministic ID ("s1", "s2", …).
	ID   string
	Argv []string
	// Env replaces the default environment when non-empty, or adds to it with AddEnv.
	Env []string
	// AddEnv adds Env to the default environment; an entry of Env wins over a default
	// of the same name.
	AddEnv bool
	// Cwd defaults to the workspace; a relative Cwd is taken from the workspace.
	Cwd string
	// TTY runs the session on a pseudo-terminal of this size.
	TTY *Size
	// HoldOutput keeps all output until the first reader attaches (the main command
	// starts before its client connects).
	HoldOutput bool
	// Ephemeral sessions leave the manager as soon as they finish (one-shot Execute).
	Ephemeral bool
	// ExecOnly, when not nil, are the only files the session may execute (RestrictExec).
	ExecOnly []string
	// Root, when set, is the directory the session runs chrooted in (the gated root).
	Root string
}

// ExitStatus tells how a session ended.
type ExitStatus struct {
	// Code is the exit code, or -1 when a signal ended the process.
	Code int
	// Signal is the signal that ended the process, or 0.
	Signal int
	// Err says why the command could not be started (Code is then 126 or 127).
	Err string
}

// Manager owns a sandbox's sessions.
type Manager struct {
	workspace  string
	defaultEnv []string
	log        *slog.Logger
	// disabled, when set, is why new sessions are refused (the process tier).
	disabled string
	// runAs, when set, is the user commands run as (see RunAs).
	runAs *syscall.Credential

	mu sync.Mutex // guards the fields below; held across fork (see package doc)
	// fileSize, when set, is the RLIMIT_FSIZE of every command, which starts through the
	// trampoline self (see LimitFileSize).
	fileSize int64
	// nproc, when set, is the RLIMIT_NPROC of every command, set the same way (see
	// LimitProcesses).
	nproc int64
	self  string
	// cgroup is the group the sandbox's commands run in, each in a group of its own below
	// it (UseCgroup); nil: they stay in the agent's.
	cgroup    *cgroups.Group
	cgroupSeq int
	sessions  map[string]*Session
	exited    []*Session // exited sessions, oldest first
	byPID     map[int]*Session
	nextID    int

	reaperDone chan struct{} // closed when reap returns
}

// NewManager returns a Manager for commands that run in workspace with defaultEnv, and
// starts its reaper, which runs until ctx ends.
func NewManager(ctx context.Context, workspace string, defaultEnv []string, log *slog.Logger) *Manager {
	m := &Manager{
		workspace:  workspace,
		defaultEnv: defaultEnv,
		log:        log,
		sessions:   make(map[string]*Session),
		byPID:      make(map[int]*Session),
		reaperDone: make(chan struct{}),
	}
	// Orphans of sessions reparent to us rather than to a host init we cannot see.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		log.Warn("cannot become child subreaper; orphaned processes will escape session tracking", "err", err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	go m.reap(ctx, sigs)
	return m
}

// RunAs makes every later session run as uid/gid (with that group only) instead of the
// agent's own user; the agent then needs CAP_SETUID, CAP_SETGID and CAP_KILL.
func (m *Manager) RunAs(uid, gid uint32) {
	m.runAs = &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{gid}}
}

// Disable refuses every new session with reason (the main session, started before, stays).
func (m *Manager) Disable(reason string) { m.disabled = reason }

// Start spawns a session. A command that cannot be started still yields a session, already
// exited with status 127 (not found) or 126 (not executable), whose ExitStatus says why.
func (m *Manager) Start(spec Spec) (*Session, error) {
	if m.disabled != "" {
		return nil, fmt.Errorf("sessions are unavailable: %s: %w", m.disabled, errdefs.ErrUnavailable)
	}
	return m.start(spec, false, false)
}

// StartMain spawns the sandbox's main command, even when sessions are disabled. What it
// leaves running when it exits is not killed: the main command is the sandbox's service.
func (m *Manager) StartMain(spec Spec) (*Session, error) { return m.start(spec, false, true) }

// RestartMain is StartMain for a command that ran before under the same ID: a session of
// that ID that is done makes way for the new one (the supervisor reuses "main").
func (m *Manager) RestartMain(spec Spec) (*Session, error) { return m.start(spec, true, true) }

func (m *Manager) start(spec Spec, replaceDone, main bool) (*Session, error) {
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return nil, fmt.Errorf("argv is empty: %w", errdefs.ErrInvalidArgument)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if replaceDone {
		m.dropDone(spec.ID)
	}
	id, err := m.assignID(spec.ID)
	if err != nil {
		return nil, err
	}
	s := newSession(id, spec)
	m.sessions[id] = s
	l := m.prepare(spec)
	if l.err == nil && m.cgroup != nil {
		s.group, l.cgroup = m.commandGroup(id)
		s.killGroup = !main
		defer closeAll(l.cgroup...)
	}
	if err := s.spawn(l.limited(m.self, m.fileSize, m.nproc, m.runAs), m.runAs); err != nil {
		if s.group != nil {
			_ = s.group.Delete()
		}
		s.failed(err)
		m.retire(s)
		return s, nil
	}
	m.byPID[s.PID] = s
	go s.finish(func() { m.finished(s) })
	return s, nil
}

func (m *Manager) assignID(want string) (string, error) {
	if want == "" {
		for {
			m.nextID++
			id := "s" + strconv.Itoa(m.nextID)
			if _, taken := m.sessions[id]; !taken {
				return id, nil
			}
		}
	}
	if !validID(want) {
		return "", fmt.Errorf("session ID %q: want 1-64 letters, digits, '-', '_' or '.': %w", want, errdefs.ErrInvalidArgument)
	}
	if _, taken := m.sessions[want]; taken {
		return "", fmt.Errorf("session %q: %w", want, errdefs.ErrAlreadyExists)
	}
	return want, nil
}

// dropDone forgets the session named id if it is done; callers hold m.mu.
func (m *Manager) dropDone(id string) {
	s, ok := m.sessions[id]
	if !ok {
		return
	}
	if _, done := s.Status(); !done {
		return
	}
	delete(m.sessions, id)
	m.exited = slices.DeleteFunc(m.exited, func(e *Session) bool { return e == s })
}

func validID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.", r)) {
			return false
		}
	}
	return true
}

// launch is a resolved command line, ready to fork.
type launch struct {
	path string
	argv []string
	env  []string
	dir  string
	err  error // why it cannot be launched
	// execOnly, when not nil, are the only files the command may execute.
	execOnly []string
	// cgroup are the cgroup.procs files of the command's own cgroup, which it joins in
	// the trampoline before it runs anything.
	cgroup []*os.File
	// asSelf: the trampoline takes the command's ids itself, after joining its cgroup.
	asSelf bool
	// root is the directory the command runs chrooted in ("": the sandbox's root).
	root string
}

func (m *Manager) prepare(spec Spec) launch {
	l := launch{argv: spec.Argv, env: spec.Env, dir: m.workspace, execOnly: spec.ExecOnly, root: spec.Root}
	switch {
	case spec.AddEnv:
		l.env = mergeEnv(m.defaultEnv, spec.Env)
	case len(l.env) == 0:
		l.env = m.defaultEnv
	}
	if spec.Cwd != "" {
		l.dir = spec.Cwd
		if !filepath.IsAbs(l.dir) {
			l.dir = filepath.Join(m.workspace, l.dir)
		}
	}
	if fi, err := os.Stat(l.dir); err != nil || !fi.IsDir() {
		l.err = fmt.Errorf("working directory %s: not a directory", l.dir)
		return l
	}
	l.env = append(slices.Clip(l.env), "PWD="+l.dir)
	l.path, l.err = lookPath(spec.Argv[0], envValue(l.env, "PATH"), l.dir)
	return l
}

func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

// errNotFound and errNotExecutable map to the shell's exit codes 127 and 126.
var (
	errNotFound      = errors.New("command not found")
	errNotExecutable = errors.New("permission denied")
)

// lookPath finds file the way a shell does, in the session's own PATH, not the agent's.
func lookPath(file, path, dir string) (string, error) {
	if strings.Contains(file, "/") {
		p := file
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		return p, executable(p)
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, file)
		if err := executable(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w", file, errNotFound)
}

func executable(p string) error {
	fi, err := os.Stat(p)
	switch {
	case err != nil:
		return fmt.Errorf("%s: %w", p, errNotFound)
	case fi.IsDir() || fi.Mode()&0o111 == 0:
		return fmt.Errorf("%s: %w", p, errNotExecutable)
	}
	return nil
}

// Get returns the session named id.
func (m *Manager) Get(id string) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	if !ok {
		return nil, fmt.Errorf("session %q: %w", id, errdefs.ErrNotFound)
	}
	return s, nil
}

// List returns every session the manager holds, in ID order.
func (m *Manager) List() []*Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *Session) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Remove forgets a session that has finished.
func (m *Manager) Remove(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.sessions, id)
}

func (m *Manager) finished(s *Session) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.retire(s)
}

// retire records an exited session, dropping it at once when ephemeral and the oldest
// exited ones past keepExited; callers hold m.mu.
func (m *Manager) retire(s *Session) {
	if s.spec.Ephemeral {
		return // Execute removes it when it has read the output
	}
	if m.sessions[s.ID] != s {
		return // replaced already (RestartMain may run before retire)
	}
	m.exited = append(m.exited, s)
	for len(m.exited) > keepExited {
		// Only the very session: its ID may name a newer one by now.
		if old := m.exited[0]; m.sessions[old.ID] == old {
			delete(m.sessions, old.ID)
		}
		m.exited = m.exited[1:]
	}
}

// reap collects every exited child. It holds m.mu around wait4 so that it cannot collect a
// child that start has forked but not yet registered.
func (m *Manager) reap(ctx context.Context, sigs chan os.Signal) {
	defer close(m.reaperDone)
	defer signal.Stop(sigs)
	for {
		select {
		case <-ctx.Done():
			return
		case <-sigs:
		}
		// A reaper whose context has ended must not wait for any child at all: another
		// Manager in the process (tests make one after another) owns them now, and a child
		// reaped here would never be reported to its session.
		for ctx.Err() == nil && m.reapOne() {
		}
	}
}

// ReaperDone is closed once the reaper has stopped, after the context given to
// NewManager ended.
func (m *Manager) ReaperDone() <-chan struct{} { return m.reaperDone }

func (m *Manager) reapOne() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ws unix.WaitStatus
	pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
	if pid <= 0 || err != nil {
		return false
	}
	if s, ok := m.byPID[pid]; ok {
		delete(m.byPID, pid)
		s.exit(ws)
	}
	return true
}

// Session is one command running (or run) in the sandbox.
type Session struct {
	ID   string
	Argv []string
	PID  int
	TTY  bool
	spec Spec

	out     *outputLog
	stdinMu sync.Mutex
	stdin   *os.File // pipe write end, or the PTY master
	ptmx    *os.File
	readers []*os.File // stdout, stderr pipes, or the PTY master

	// group is the session's own cgroup (nil without one); with killGroup, whatever is
	// left in it is killed once the session's process has exited.
	group     *cgroups.Group
	killGroup bool

	exitOnce sync.Once
	exited   chan struct{} // closed when the process has exited
	done     chan struct{} // closed when the process has exited and its output is all in
	status   ExitStatus
}

func newSession(id string, spec Spec) *Session {
	return &Session{
		ID:     id,
		Argv:   spec.Argv,
		TTY:    spec.TTY != nil,
		spec:   spec,
		out:    newOutputLog(logCapacity, spec.HoldOutput),
		exited: make(chan struct{}),
		done:   make(chan struct{}),
	}
}

// spawn forks the process with its stdio, as cred when set; callers hold the manager's lock.
func (s *Session) spawn(l launch, cred *syscall.Credential) error {
	if l.err != nil {
		return l.err
	}
	child, err := s.openStdio(cred)
	if err != nil {
		return err
	}
	procCred := cred
	if l.asSelf {
		procCred = nil // the trampoline takes cred once it has joined its cgroup
	}
	files := slices.Concat(child, l.cgroup)
	attr := &os.ProcAttr{Dir: l.dir, Env: l.env, Files: files, Sys: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: procCred}}
	if s.TTY {
		attr.Sys = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Pdeathsig: syscall.SIGKILL, Credential: procCred}
	}
	p, err := os.StartProcess(l.path, l.argv, attr)
	closeAll(child...)
	if err != nil {
		s.closeStdio()
		return err
	}
	s.PID = p.Pid
	_ = p.Release() // the reaper waits for it by PID; this only drops Go's pidfd
	resetOOMScore(s.PID)
	return nil
}

// resetOOMScore puts a child's OOM score back to 0 when the agent runs protected (below 0),
// so that the OOM killer picks the command, not the agent. The child has exec'd by now, so
// its /proc entry is writable by our (same) user.
func resetOOMScore(pid int) {
	own, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil || !strings.HasPrefix(string(own), "-") {
		return
	}
	_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte("0"), 0)
}

// openStdio creates the session's stdio and returns the child's ends (stdin, stdout, stderr).
// A terminal is given to the user the command runs as, as login does.
func (s *Session) openStdio(cred *syscall.Credential) ([]*os.File, error) {
	if s.TTY {
		ptmx, tty, err := pty.Open()
		if err != nil {
			return nil, fmt.Errorf("open pty: %w", err)
		}
		if cred != nil {
			if err := tty.Chown(int(cred.Uid), int(cred.Gid)); err != nil {
				closeAll(ptmx, tty)
				return nil, fmt.Errorf("give pty to uid %d: %w", cred.Uid, err)
			}
		}
		_ = pty.Setsize(ptmx, &pty.Winsize{Rows: s.spec.TTY.Rows, Cols: s.spec.TTY.Cols})
		s.ptmx, s.stdin, s.readers = ptmx, ptmx, []*os.File{ptmx}
		return []*os.File{tty, tty, tty}, nil
	}
	var ends [3][2]*os.File
	for i := range ends {
		r, w, err := os.Pipe()
		if err != nil {
			for _, e := range ends[:i] {
				closeAll(e[:]...)
			}
			return nil, fmt.Errorf("pipe: %w", err)
		}
		ends[i] = [2]*os.File{r, w}
	}
	for _, out := range ends[1:] {
		growPipe(out[0])
	}
	s.stdin, s.readers = ends[0][1], []*os.File{ends[1][0], ends[2][0]}
	return []*os.File{ends[0][0], ends[1][1], ends[2][1]}, nil
}

// growPipe enlarges a pipe to readSize (best effort: the per-user pipe budget may refuse).
// It goes through SyscallConn because File.Fd would switch the pipe to blocking mode, and
// the drain deadlines in pump need it non-blocking.
func growPipe(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, readSize) })
	}
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

func (s *Session) closeStdio() {
	closeAll(s.readers...)
	if s.stdin != nil && s.stdin != s.ptmx {
		s.stdin.Close()
	}
}

// failed records a session whose command never started.
func (s *Session) failed(err error) {
	code := 126
	if errors.Is(err, errNotFound) {
		code = 127
	}
	s.status = ExitStatus{Code: code, Err: err.Error()}
	s.exitOnce.Do(func() { close(s.exited) })
	s.out.close()
	close(s.done)
}

// exit records the exit status; called by the reaper.
func (s *Session) exit(ws unix.WaitStatus) {
	st := ExitStatus{Code: ws.ExitStatus()}
	if ws.Signaled() {
		st = ExitStatus{Code: -1, Signal: int(ws.Signal())}
	}
	s.exitOnce.Do(func() {
		s.status = st
		close(s.exited)
	})
}

// finish pumps the output until the process has exited and its output has stopped, then
// marks the session done and calls retire.
func (s *Session) finish(retire func()) {
	var wg sync.WaitGroup
	streams := []Stream{Stdout, Stderr}
	for i, r := range s.readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.pump(r, streams[i])
		}()
	}
	<-s.exited
	for _, r := range s.readers {
		_ = r.SetReadDeadline(time.Now().Add(drainIdle))
	}
	wg.Wait()
	s.stdinMu.Lock()
	s.closeStdio()
	s.stdin = nil
	s.stdinMu.Unlock()
	s.out.close()
	s.out.shrink(keepOutput)
	s.endGroup()
	close(s.done)
	retire()
}

// groupKillTimeout bounds the kill of what a session left running.
const groupKillTimeout = 30 * time.Second

// endGroup kills what the session's process left in its cgroup (when the session ends
// with it) and removes the group; a group that still holds processes stays.
func (s *Session) endGroup() {
	if s.group == nil {
		return
	}
	if s.killGroup {
		ctx, cancel := context.WithTimeout(context.Background(), groupKillTimeout)
		defer cancel()
		_ = s.group.Kill(ctx)
	}
	_ = s.group.Delete()
}

// pump copies one output stream into the log until EOF, or until the process has exited
// and the stream has been idle for drainIdle.
func (s *Session) pump(r *os.File, stream Stream) {
	buf := make([]byte, firstReadSize)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			data := buf[:n]
			if n < len(buf)/8 {
				data = slices.Clone(data)
			} else {
				// The log keeps buf; a read that filled it asks for a larger one.
				buf = make([]byte, nextReadSize(len(buf), n))
			}
			_ = s.out.append(context.Background(), stream, data)
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				// Go's poller fails a read whose deadline has passed without trying it, so
				// a pump that was not scheduled within drainIdle of the exit (a loaded
				// machine) would drop output already in the pipe. Take what is there.
				readBuffered(r, func(b []byte) { _ = s.out.append(context.Background(), stream, b) })
			}
			return // EOF, EIO (PTY closed) or the drain deadline
		}
		select {
		case <-s.exited:
			_ = r.SetReadDeadline(time.Now().Add(drainIdle))
		default:
		}
	}
}

// nextReadSize is the buffer for the read after one of n bytes into size: twice as large
// when the read filled it, up to readSize.
func nextReadSize(size, n int) int {
	if n == size {
		return min(2*size, readSize)
	}
	return size
}

// readBuffered hands emit what r holds right now, without waiting for more: at most
// maxBufferedReads reads, so that a background child that keeps writing cannot hold the
// session open.
func readBuffered(r *os.File, emit func([]byte)) {
	if err := r.SetReadDeadline(time.Time{}); err != nil {
		return
	}
	rc, err := r.SyscallConn()
	if err != nil {
		return
	}
	buf := make([]byte, readSize)
	for range maxBufferedReads {
		var n int
		var rerr error
		// The function reports done at once: a read that would block ends the drain
		// (EAGAIN) instead of waiting in the poller.
		if err := rc.Read(func(fd uintptr) bool { n, rerr = unix.Read(int(fd), buf); return true }); err != nil || rerr != nil || n <= 0 {
			return
		}
		emit(slices.Clone(buf[:n]))
	}
}

// maxBufferedReads bounds readBuffered: 16 reads of up to readSize.
const maxBufferedReads = 16

// Tail returns the last n bytes (at most) of the output the session still holds, both
// streams in the order they were read, and whether the session wrote more than that.
func (s *Session) Tail(n int) (out []byte, cut bool) { return s.out.tail(n) }

// Attach returns a Reader of the session's output from offset.
func (s *Session) Attach(offset uint64) *Reader {
	return &Reader{log: s.out, r: s.out.attach(offset)}
}

// Reader reads a session's output; Close it to stop holding the writer back.
type Reader struct {
	log *outputLog
	r   *reader
}

// Next returns the next chunk of output, or io.EOF when the session is done and everything
// has been read.
func (r *Reader) Next(ctx context.Context) (Chunk, error) {
	c, ok, err := r.log.next(ctx, r.r)
	if err != nil {
		return Chunk{}, err
	}
	if !ok {
		return Chunk{}, io.EOF
	}
	return c, nil
}

// Close detaches the reader.
func (r *Reader) Close() { r.log.detach(r.r) }

// WriteStdin writes to the session's stdin and, with close, closes it afterwards.
func (s *Session) WriteStdin(data []byte, closeAfter bool) error {
	s.stdinMu.Lock()
	defer s.stdinMu.Unlock()
	if s.stdin == nil {
		if len(data) == 0 && closeAfter {
			return nil
		}
		return fmt.Errorf("session %s: stdin is closed: %w", s.ID, errdefs.ErrFailedPrecondition)
	}
	if _, err := s.stdin.Write(data); err != nil {
		return fmt.Errorf("session %s: write stdin: %w", s.ID, err)
	}
	if closeAfter {
		if s.TTY {
			_, err := s.stdin.Write([]byte{4}) // ^D: a terminal has no half-close
			return err
		}
		err := s.stdin.Close()
		s.stdin = nil
		return err
	}
	return nil
}

// Signal sends sig to the session's whole process group.
func (s *Session) Signal(sig syscall.Signal) error {
	if s.PID == 0 {
		return fmt.Errorf("session %s never started: %w", s.ID, errdefs.ErrFailedPrecondition)
	}
	if err := unix.Kill(-s.PID, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("session %s: signal %d: %w", s.ID, sig, err)
	}
	return nil
}

// Resize changes the session's terminal size.
func (s *Session) Resize(sz Size) error {
	if s.ptmx == nil {
		return fmt.Errorf("session %s has no terminal: %w", s.ID, errdefs.ErrFailedPrecondition)
	}
	return pty.Setsize(s.ptmx, &pty.Winsize{Rows: sz.Rows, Cols: sz.Cols})
}

// Wait returns the exit status once the session is done (exited, output all in).
func (s *Session) Wait(ctx context.Context) (ExitStatus, error) {
	select {
	case <-s.done:
		return s.status, nil
	case <-ctx.Done():
		return ExitStatus{}, ctx.Err()
	}
}

// Running reports whether the process has not exited yet.
func (s *Session) Running() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Status returns the exit status and whether the session is done.
func (s *Session) Status() (ExitStatus, bool) {
	select {
	case <-s.done:
		return s.status, true
	default:
		return ExitStatus{}, false
	}
}

// mergeEnv is base with extra's entries added; an entry of extra replaces base's of the
// same name.
func mergeEnv(base, extra []string) []string {
	out := make([]string, 0, len(base)+len(extra))
	names := make(map[string]bool, len(extra))
	for _, kv := range extra {
		name, _, _ := strings.Cut(kv, "=")
		names[name] = true
	}
	for _, kv := range base {
		if name, _, _ := strings.Cut(kv, "="); !names[name] {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}
