package cgroups

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// These tests create real cgroups in whichever mode the host runs (v1 on the development
// machines, v2 in production), so they need root. They skip only when the kernel lacks a
// controller they need.

const helperEnv = "PADDOCK_CGROUPS_HELPER"

// TestHelperProcess is not a test: re-executed as a child with helperEnv set, it waits for
// a line on stdin (so it can be moved into a cgroup first), then does what helperEnv names.
func TestHelperProcess(t *testing.T) {
	switch os.Getenv(helperEnv) {
	case "":
		return
	case "alloc":
		bufio.NewReader(os.Stdin).ReadString('\n')
		b := make([]byte, 256<<20)
		for i := 0; i < len(b); i += os.Getpagesize() {
			b[i] = 1 // touch every page so it is really charged
		}
		runtime.KeepAlive(b)
		fmt.Println("allocated", len(b))
	}
	os.Exit(0)
}

// requireControllers fails unless the test runs as root, and skips when the kernel truly
// lacks one of controllers.
func requireControllers(t *testing.T, controllers ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("cgroup tests must run as root: only root may create cgroups")
	}
	switch DetectMode() {
	case V1:
		b, err := os.ReadFile("/proc/cgroups")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range controllers {
			if !v1Enabled(string(b), c) {
				t.Skipf("kernel has no cgroup v1 %s controller (not enabled in /proc/cgroups)", c)
			}
		}
	case V2:
		offered, err := readFile(mountpoint, "cgroup.controllers")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range controllers {
			// v2 freezes through cgroup.freeze in every group; there is no freezer controller.
			if c != "freezer" && !strings.Contains(" "+offered+" ", " "+c+" ") {
				t.Skipf("kernel offers no cgroup v2 %s controller (not in %s/cgroup.controllers)", c, mountpoint)
			}
		}
	default:
		t.Skipf("kernel has no cgroupfs mounted at %s", mountpoint)
	}
}

// v1Enabled reports whether /proc/cgroups lists controller c as enabled.
func v1Enabled(procCgroups, c string) bool {
	for _, line := range strings.Split(procCgroups, "\n") {
		f := strings.Fields(line)
		if len(f) == 4 && f[0] == c && f[3] == "1" {
			return true
		}
	}
	return false
}

// testPath returns a cgroup path unique to this test run.
func testPath(t *testing.T) string {
	return fmt.Sprintf("/paddock-test/%s-%s", strings.ReplaceAll(t.Name(), "/", "_"), rand.Text()[:10])
}

// TestMain removes /paddock-test, the parent of every test's group, once every test is
// done. A test's own cleanup must not: another test running in parallel may be between
// making the parent and making its group in it (TestMemoryLimitOOMKills once failed with
// ENOENT that way).
func TestMain(m *testing.M) {
	code := m.Run()
	parents, _ := filepath.Glob("/sys/fs/cgroup/*/paddock-test")
	for _, parent := range append(parents, "/sys/fs/cgroup/paddock-test") {
		os.Remove(parent) // fails if a group is left, which the tests report themselves
	}
	os.Exit(code)
}

// newGroup creates a group with limits l that is killed and deleted when the test ends.
func newGroup(t *testing.T, l Limits) *Group {
	t.Helper()
	g, err := Create(testPath(t), l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cleanup(t, g) })
	return g
}

func cleanup(t *testing.T, g *Group) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Kill(ctx); err != nil {
		t.Errorf("cleanup: %v", err)
	}
	if err := g.Delete(); err != nil {
		t.Errorf("cleanup: %v", err)
	}
}

// dirOf returns the directory holding controller c's files for g.
func dirOf(g *Group, c string) string {
	if g.mode == V1 {
		return g.controller(c)
	}
	return g.dirs[0]
}

// startInGroup starts cmd blocked on a line of stdin, adds it to g, and returns the function
// that lets it run: the order a sandbox uses so nothing runs outside the limits.
func startInGroup(t *testing.T, g *Group, cmd *exec.Cmd) (release func()) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	return func() {
		io.WriteString(stdin, "go\n")
		stdin.Close()
	}
}

// outputFile gives cmd a file for stdout and stderr, which grandchildren may keep writing
// after cmd exits; read it with readOutput.
func outputFile(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	cmd.Stdout, cmd.Stderr = f, f
	return f.Name()
}

func readOutput(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// eventually polls cond every 10ms until it holds or timeout passes.
func eventually(timeout time.Duration, cond func() bool) bool {
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return math.MaxInt
	}
	return n
}

func killedBy(err error, sig syscall.Signal) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// dead reports whether pid has exited: gone, or a zombie waiting for its parent.
func dead(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// The state follows the parenthesised command name, which may itself hold ") ".
	s := string(b)
	rest := s[strings.LastIndex(s, ")")+1:]
	return strings.HasPrefix(strings.TrimSpace(rest), "Z")
}

func TestCreateWritesLimitsAndDeleteRemoves(t *testing.T) {
	t.Parallel()
	requireControllers(t, "memory", "cpu", "pids", "freezer")
	l := Limits{MemoryBytes: 64 << 20, CPUs: 0.5, Pids: 32}
	g := newGroup(t, l)

	type file struct{ controller, name, want string }
	var files []file
	switch g.mode {
	case V1:
		files = []file{
			{"memory", "memory.limit_in_bytes", "67108864"},
			{"cpu", "cpu.cfs_period_us", "100000"},
			{"cpu", "cpu.cfs_quota_us", "50000"},
			{"pids", "pids.max", "32"},
		}
		if exists(g.controller("memory"), "memory.memsw.limit_in_bytes") {
			files = append(files, file{"memory", "memory.memsw.limit_in_bytes", "67108864"})
		}
	case V2:
		files = []file{
			{"memory", "memory.max", "67108864"},
			{"cpu", "cpu.max", "50000 100000"},
			{"pids", "pids.max", "32"},
		}
		if exists(g.dirs[0], "memory.swap.max") {
			files = append(files, file{"memory", "memory.swap.max", "0"})
		}
	}
	for _, f := range files {
		got, err := readFile(dirOf(g, f.controller), f.name)
		if err != nil {
			t.Fatal(err)
		}
		if got != f.want {
			t.Errorf("%s/%s = %q, want %q", dirOf(g, f.controller), f.name, got, f.want)
		}
	}
	if got, err := g.MemoryLimit(); err != nil || got != l.MemoryBytes {
		t.Errorf("MemoryLimit() = %d, %v; want %d", got, err, l.MemoryBytes)
	}

	if _, err := Create(g.Path(), l); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("Create of an existing group: err = %v, want ErrAlreadyExists", err)
	}

	if err := g.Delete(); err != nil {
		t.Fatal(err)
	}
	for _, dir := range g.dirs {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after Delete (stat err %v)", dir, err)
		}
	}
	if err := g.Delete(); err != nil {
		t.Errorf("second Delete = %v, want nil", err)
	}
}

func TestCreateWithoutLimitsIsUnlimited(t *testing.T) {
	t.Parallel()
	requireControllers(t, "memory", "pids")
	g := newGroup(t, Limits{})
	if got, err := g.MemoryLimit(); err != nil || got != 0 {
		t.Errorf("MemoryLimit() = %d, %v; want 0 (unlimited)", got, err)
	}
	if got, err := readFile(dirOf(g, "pids"), "pids.max"); err != nil || got != "max" {
		t.Errorf("pids.max = %q, %v; want max", got, err)
	}
}

func TestPidsLimitStopsForks(t *testing.T) {
	t.Parallel()
	requireControllers(t, "pids")
	const max = 5
	g := newGroup(t, Limits{Pids: max})

	cmd := exec.Command("sh", "-c", `read x; i=0; while [ $i -lt 20 ]; do sleep 60 & i=$((i+1)); done; wait`)
	out := outputFile(t, cmd)
	startInGroup(t, g, cmd)()

	// pids.events counts forks refused because of pids.max.
	refused := func() bool {
		n, err := readKeyed(dirOf(g, "pids"), "pids.events", "max")
		return err == nil && n > 0
	}
	if !eventually(10*time.Second, refused) {
		t.Fatalf("no fork was refused in 10s; shell output: %q", readOutput(t, out))
	}
	// ForksRefused reads the same count, through Load as the control plane does.
	loaded, err := Load(g.Path())
	if err != nil {
		t.Fatal(err)
	}
	if n, err := loaded.ForksRefused(); err != nil || n == 0 {
		t.Errorf("ForksRefused() after refused forks = %d, %v; want at least 1", n, err)
	}
	// The shell writes its complaint after the refused fork is counted: wait for the line.
	reported := func() bool {
		s := readOutput(t, out)
		return strings.Contains(s, "fork") || strings.Contains(s, "temporarily unavailable")
	}
	if !eventually(10*time.Second, reported) {
		t.Errorf("shell did not report a failed fork; output: %q", readOutput(t, out))
	}
	pids, err := g.Pids()
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) > max {
		t.Errorf("%d processes in the group, pids.max is %d", len(pids), max)
	}
	if cur, err := readFile(dirOf(g, "pids"), "pids.current"); err != nil || atoi(cur) > max {
		t.Errorf("pids.current = %q, %v; want at most %d", cur, err, max)
	}
}

func TestMemoryLimitOOMKills(t *testing.T) {
	t.Parallel()
	requireControllers(t, "memory")
	const limit = 32 << 20
	g := newGroup(t, Limits{MemoryBytes: limit})

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"=alloc")
	out := outputFile(t, cmd)
	startInGroup(t, g, cmd)()
	err := cmd.Wait()
	if !killedBy(err, syscall.SIGKILL) {
		t.Fatalf("helper allocating 256 MiB under a 32 MiB limit: wait = %v, want killed by SIGKILL; output %q", err, readOutput(t, out))
	}
	n, err := g.OOMKills()
	if err != nil {
		t.Fatal(err)
	}
	if n < 1 {
		t.Errorf("OOMKills() = %d, want at least 1", n)
	}

	// The container tier loads a group runc made; it must read the same.
	loaded, err := Load(g.Path())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := loaded.OOMKills(); err != nil || got != n {
		t.Errorf("Load(%s).OOMKills() = %d, %v; want %d", g.Path(), got, err, n)
	}
	if got, err := loaded.MemoryLimit(); err != nil || got != limit {
		t.Errorf("Load(%s).MemoryLimit() = %d, %v; want %d", g.Path(), got, err, limit)
	}
}

func TestKillReachesEveryProcess(t *testing.T) {
	t.Parallel()
	requireControllers(t, "freezer")
	g := newGroup(t, Limits{})

	// Two plain children, one orphaned grandchild in its own session (its parent exits at
	// once), and one child that is a session leader: none share the shell's process group.
	cmd := exec.Command("sh", "-c", `read x
sleep 300 &
setsid sh -c 'sleep 300 &'
setsid sleep 300 &
sleep 300 &
echo ready
wait`)
	out := outputFile(t, cmd)
	startInGroup(t, g, cmd)()
	if !eventually(10*time.Second, func() bool { return strings.Contains(readOutput(t, out), "ready") }) {
		t.Fatalf("shell not ready; output %q", readOutput(t, out))
	}
	var pids []int
	eventually(5*time.Second, func() bool {
		pids, _ = g.Pids()
		return len(pids) >= 5
	})
	if len(pids) < 5 {
		t.Fatalf("Pids() = %v, want the shell and 4 sleeps", pids)
	}
	shellSid, _ := unix.Getsid(cmd.Process.Pid)
	otherSession := false
	for _, pid := range pids {
		if sid, err := unix.Getsid(pid); err == nil && sid != shellSid {
			otherSession = true
		}
	}
	if !otherSession {
		t.Fatalf("test setup: no process in %v left the shell's session", pids)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if left, err := g.Pids(); err != nil || len(left) != 0 {
		t.Errorf("after Kill, Pids() = %v, %v; want none", left, err)
	}
	if err := cmd.Wait(); !killedBy(err, syscall.SIGKILL) {
		t.Errorf("shell: wait = %v, want killed by SIGKILL", err)
	}
	for _, pid := range pids {
		if !dead(pid) {
			t.Errorf("pid %d still running after Kill", pid)
		}
	}
	if err := g.Delete(); err != nil {
		t.Errorf("Delete after Kill: %v", err)
	}
}

func TestKillStopsAtContextEnd(t *testing.T) {
	t.Parallel()
	requireControllers(t, "freezer")
	g := newGroup(t, Limits{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cmd := exec.Command("sleep", "300")
	startInGroup(t, g, cmd)()
	if err := g.Kill(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Kill with a cancelled context and a live process = %v, want context.Canceled", err)
	}
}

func TestDeleteWithProcessesFails(t *testing.T) {
	t.Parallel()
	requireControllers(t, "pids")
	g := newGroup(t, Limits{})
	startInGroup(t, g, exec.Command("sleep", "300"))()
	if err := g.Delete(); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Delete of a group with a process = %v, want ErrFailedPrecondition", err)
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	requireControllers(t, "memory")

	if _, err := Load(testPath(t)); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Load of a missing group = %v, want ErrNotFound", err)
	}

	g := newGroup(t, Limits{MemoryBytes: 16 << 20})
	loaded, err := Load(g.Path())
	if err != nil {
		t.Fatal(err)
	}
	if loaded.Path() != g.Path() {
		t.Errorf("Path() = %q, want %q", loaded.Path(), g.Path())
	}
	if n, err := loaded.OOMKills(); err != nil || n != 0 {
		t.Errorf("OOMKills() of a fresh group = %d, %v; want 0", n, err)
	}
	if n, err := loaded.ForksRefused(); err != nil || n != 0 {
		t.Errorf("ForksRefused() of a fresh group = %d, %v; want 0", n, err)
	}
	if pids, err := loaded.Pids(); err != nil || len(pids) != 0 {
		t.Errorf("Pids() of a fresh group = %v, %v; want none", pids, err)
	}

	// A group that vanished (its runtime deleted it): nothing to kill, nothing to delete.
	if err := g.Delete(); err != nil {
		t.Fatal(err)
	}
	if err := loaded.Kill(context.Background()); err != nil {
		t.Errorf("Kill of a deleted group = %v, want nil", err)
	}
	if err := loaded.Delete(); err != nil {
		t.Errorf("Delete of a deleted group = %v, want nil", err)
	}
	if _, err := loaded.Pids(); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Pids() of a deleted group = %v, want ErrNotFound", err)
	}
}

func TestAddRejects(t *testing.T) {
	t.Parallel()
	requireControllers(t, "pids")
	g := newGroup(t, Limits{})
	tests := []struct {
		pid  int
		want error
	}{
		{0, errdefs.ErrInvalidArgument},
		{-1, errdefs.ErrInvalidArgument},
		{1 << 30, errdefs.ErrNotFound}, // above any pid_max
	}
	for _, tt := range tests {
		if err := g.Add(tt.pid); !errors.Is(err, tt.want) {
			t.Errorf("Add(%d) = %v, want %v", tt.pid, err, tt.want)
		}
	}
}
