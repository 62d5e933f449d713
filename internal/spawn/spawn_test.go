package spawn_test

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"

	"github.com/paddockhq/paddock/internal/spawn"
)

// The main goroutine keeps the main thread, which Go never ends: the tests' locked
// goroutines run on threads that end with them.
func init() { runtime.LockOSThread() }

// A goroutine that ends locked to its thread ends the thread, and Linux kills the children
// that thread forked with a Pdeathsig. Two children are started from such a goroutine: one
// directly, the control, which dies with the thread; one through Start, which lives on.
func TestChildOutlivesTheCallingThread(t *testing.T) {
	sleeper := func() *exec.Cmd {
		cmd := exec.Command("sleep", "600")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		return cmd
	}
	direct, spawned := sleeper(), sleeper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := direct.Start(); err != nil {
			errc <- err
			return
		}
		errc <- spawn.Start(spawned)
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	spawnedDone := make(chan struct{})
	go func() { _ = spawned.Wait(); close(spawnedDone) }()
	t.Cleanup(func() {
		_ = spawned.Process.Kill()
		<-spawnedDone
	})

	// The control's death is the sign that the thread has ended and its signal is sent.
	_ = direct.Wait()
	if ws, ok := direct.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the control ended with %v, want killed by its parent thread's death", direct.ProcessState)
	}
	select {
	case <-spawnedDone:
		t.Fatalf("the child started through Start died with the calling thread: %v", spawned.ProcessState)
	default:
	}
	if err := spawned.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the child started through Start is gone: %v", err)
	}
}

// Start keeps the caller's niceness: the pool's refill runs niced, and what it starts
// yields the CPU as it does.
func TestStartKeepsTheCallersNiceness(t *testing.T) {
	errc := make(chan error, 1)
	var out []byte
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tid := syscall.Gettid()
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, 7); err != nil {
			errc <- err
			return
		}
		defer syscall.Setpriority(syscall.PRIO_PROCESS, tid, 0)
		cmd := exec.Command("sh", "-c", "cut -d' ' -f19 /proc/self/stat")
		var buf []byte
		cmd.Stdout = writerFunc(func(b []byte) (int, error) { buf = append(buf, b...); return len(b), nil })
		if err := spawn.Start(cmd); err != nil {
			errc <- err
			return
		}
		err := cmd.Wait()
		out = buf
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if got := string(out); got != "7\n" {
		t.Fatalf("the child's niceness = %q, want 7 (the caller's)", got)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
