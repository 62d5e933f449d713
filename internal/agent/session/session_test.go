package session

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

func newManager(t *testing.T) *Manager {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	m := NewManager(ctx, t.TempDir(), []string{"PATH=/usr/bin:/bin", "HOME=/tmp"}, slog.New(slog.DiscardHandler))
	// The next test's Manager must be the only reaper: wait for this one to stop.
	t.Cleanup(func() {
		cancel()
		<-m.ReaperDone()
	})
	return m
}

// collect reads a session's output to the end, split by stream, in order.
func collect(t *testing.T, s *Session) (stdout, stderr string, order []Stream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := s.Attach(0)
	defer r.Close()
	var out, errb bytes.Buffer
	for {
		c, err := r.Next(ctx)
		if err == io.EOF {
			return out.String(), errb.String(), order
		}
		if err != nil {
			t.Fatalf("read output: %v", err)
		}
		if c.Stream == Stdout {
			out.Write(c.Data)
		} else {
			errb.Write(c.Data)
		}
		order = append(order, c.Stream)
	}
}

func wait(t *testing.T, s *Session) ExitStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := s.Wait(ctx)
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	return st
}

func start(t *testing.T, m *Manager, argv ...string) *Session {
	t.Helper()
	s, err := m.Start(Spec{Argv: argv})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestExitStatus(t *testing.T) {
	m := newManager(t)
	if err := os.WriteFile(m.workspace+"/data.txt", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		argv []string
		want ExitStatus
	}{
		{"success", []string{"true"}, ExitStatus{Code: 0}},
		{"exit code", []string{"sh", "-c", "exit 7"}, ExitStatus{Code: 7}},
		{"signal", []string{"sh", "-c", "kill -TERM $$"}, ExitStatus{Code: -1, Signal: int(syscall.SIGTERM)}},
		{"not found", []string{"no-such-command"}, ExitStatus{Code: 127, Err: "no-such-command: command not found"}},
		{"not executable", []string{"./data.txt"}, ExitStatus{Code: 126, Err: m.workspace + "/data.txt: permission denied"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := wait(t, start(t, m, tt.argv...)); got != tt.want {
				t.Fatalf("status = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestStdoutStderrApartAndOrdered(t *testing.T) {
	m := newManager(t)
	s := start(t, m, "sh", "-c", "echo out1; sleep 0.05; echo err1 >&2; sleep 0.05; echo out2")
	out, errs, order := collect(t, s)
	if out != "out1\nout2\n" || errs != "err1\n" {
		t.Fatalf("stdout %q stderr %q", out, errs)
	}
	if want := []Stream{Stdout, Stderr, Stdout}; !slicesEqual(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
}

func slicesEqual(a, b []Stream) bool {
	return len(a) == len(b) && string(streamBytes(a)) == string(streamBytes(b))
}

func streamBytes(s []Stream) []byte {
	b := make([]byte, len(s))
	for i, x := range s {
		b[i] = byte(x)
	}
	return b
}

func TestStdin(t *testing.T) {
	m := newManager(t)
	s := start(t, m, "wc", "-c")
	if err := s.WriteStdin([]byte("hello "), false); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteStdin([]byte("world"), true); err != nil {
		t.Fatal(err)
	}
	out, _, _ := collect(t, s)
	if strings.TrimSpace(out) != "11" {
		t.Fatalf("wc -c = %q, want 11", out)
	}
	if err := s.WriteStdin([]byte("x"), false); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("write after close: %v", err)
	}
}

func TestLargeOutputIntactWithBackpressure(t *testing.T) {
	m := newManager(t)
	// 3x the log's capacity, read slowly at first: nothing may be lost.
	const size = 3 * logCapacity
	s := start(t, m, "head", "-c", "12582912", "/dev/urandom")
	r := s.Attach(0)
	defer r.Close()
	time.Sleep(200 * time.Millisecond) // let the writer hit the bound
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var total uint64
	for {
		c, err := r.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if c.Lost != 0 || c.Offset != total {
			t.Fatalf("chunk at %d (lost %d), expected %d", c.Offset, c.Lost, total)
		}
		total += uint64(len(c.Data))
	}
	if total != size {
		t.Fatalf("read %d bytes, want %d", total, size)
	}
}

func TestReplayAndLostWhenDetached(t *testing.T) {
	m := newManager(t)
	s := start(t, m, "sh", "-c", "echo first; head -c 10000000 /dev/zero; echo last")
	st := wait(t, s) // nobody attached: the log keeps only the most recent output
	if st.Code != 0 {
		t.Fatalf("status %+v", st)
	}
	r := s.Attach(0)
	defer r.Close()
	c, err := r.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c.Lost == 0 || c.Offset != c.Lost {
		t.Fatalf("first chunk offset %d lost %d: want the dropped head reported", c.Offset, c.Lost)
	}
	var tail []byte
	for ; err == nil; c, err = r.Next(context.Background()) {
		tail = append(tail, c.Data...)
	}
	if !bytes.HasSuffix(tail, []byte("last\n")) {
		t.Fatalf("replay does not end with the last line")
	}
	if len(tail) > keepOutput {
		t.Fatalf("an exited session holds %d bytes of output, over %d", len(tail), keepOutput)
	}
}

func TestHoldOutputUntilFirstAttach(t *testing.T) {
	m := newManager(t)
	s, err := m.StartMain(Spec{ID: "main", Argv: []string{"head", "-c", "10000000", "/dev/zero"}, HoldOutput: true})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if !s.Running() {
		t.Fatal("writer finished before anyone read: output was dropped instead of held")
	}
	out, _, _ := collect(t, s)
	if len(out) != 10000000 {
		t.Fatalf("read %d bytes, want all 10000000", len(out))
	}
}

func TestBackgroundChildDoesNotHangSession(t *testing.T) {
	m := newManager(t)
	s := start(t, m, "sh", "-c", "sleep 30 & echo started")
	begin := time.Now()
	out, _, _ := collect(t, s)
	if out != "started\n" {
		t.Fatalf("out %q", out)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Fatalf("session took %v: the background child's open pipe held it", d)
	}
	_ = s.Signal(syscall.SIGKILL) // the group still holds the sleeper
}

func TestSignalReachesProcessGroup(t *testing.T) {
	m := newManager(t)
	s := start(t, m, "sh", "-c", "sleep 30 & sleep 30; echo unreachable")
	time.Sleep(100 * time.Millisecond)
	if err := s.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st := wait(t, s)
	if st.Signal != int(syscall.SIGKILL) {
		t.Fatalf("status %+v, want killed by SIGKILL", st)
	}
}

func TestTTY(t *testing.T) {
	m := newManager(t)
	s, err := m.Start(Spec{Argv: []string{"sh", "-c", "stty size; test -t 0 && echo tty"}, TTY: &Size{Rows: 33, Cols: 101}})
	if err != nil {
		t.Fatal(err)
	}
	out, _, _ := collect(t, s)
	if !strings.Contains(out, "33 101") || !strings.Contains(out, "tty") {
		t.Fatalf("tty output %q", out)
	}
	if err := s.Resize(Size{Rows: 1, Cols: 1}); err != nil && s.Running() {
		t.Fatal(err)
	}
}

func TestDeterministicIDsAndDisable(t *testing.T) {
	m := newManager(t)
	a, b := start(t, m, "true"), start(t, m, "true")
	if a.ID != "s1" || b.ID != "s2" {
		t.Fatalf("ids %q %q, want s1 s2", a.ID, b.ID)
	}
	if _, err := m.Start(Spec{ID: "s1", Argv: []string{"true"}}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("duplicate id: %v", err)
	}
	if _, err := m.Start(Spec{ID: "../x", Argv: []string{"true"}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("bad id: %v", err)
	}
	m.Disable("process tier")
	if _, err := m.Start(Spec{Argv: []string{"true"}}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("disabled start: %v", err)
	}
	if _, err := m.StartMain(Spec{ID: "main", Argv: []string{"true"}}); err != nil {
		t.Fatalf("main must start in a disabled manager: %v", err)
	}
}

func TestOrphansAreReaped(t *testing.T) {
	m := newManager(t)
	// The grandchild outlives its parent and reparents to us (subreaper); once it exits it
	// must not stay a zombie.
	s := start(t, m, "sh", "-c", "sh -c 'sleep 0.2' & echo $!")
	out, _, _ := collect(t, s)
	pid := strings.TrimSpace(out)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if !ourZombie(pid) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	st, _ := os.ReadFile("/proc/" + pid + "/stat")
	t.Fatalf("orphan %s is still a zombie of ours: %s", pid, st)
}

// ourZombie reports whether pid is a zombie whose parent is this process: an orphan the
// reaper has not collected. (A pid that is gone, or reused by someone else's process, is
// not.)
func ourZombie(pid string) bool {
	st, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ppid …; comm may hold spaces, so read after its closing parenthesis.
	f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
	return len(f) > 1 && f[0] == "Z" && f[1] == strconv.Itoa(os.Getpid())
}
