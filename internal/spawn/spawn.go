// Package spawn starts child processes whose parent-death signal must mean "when this
// process dies".
//
// Linux sends a child its Pdeathsig when the thread that forked it exits, not when the
// process does. Go ends an OS thread when a goroutine exits while locked to it (the
// pool's niced refill loop, a namespace switch that could not be undone), and the thread
// that once forked a child can be that thread later: the child is then killed while
// paddock runs on. Start forks from threads that stay locked to goroutines that never
// return, one per niceness, so that the child still inherits the caller's.
package spawn

import (
	"os/exec"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// Start starts cmd as cmd.Start does, forked from a thread that lives as long as the
// process and runs at the calling thread's niceness.
func Start(cmd *exec.Cmd) error {
	return Do(cmd.Start)
}

// Do runs fn on a thread that lives as long as the process, at the calling thread's
// niceness: what fn forks with a Pdeathsig dies with the process, not with a thread.
func Do(fn func() error) error {
	// The raw getpriority returns 20 - nice, never negative.
	prio, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
	if err != nil {
		prio = 20
	}
	t := forkerAt(20 - prio)
	done := make(chan error, 1)
	t <- func() { done <- fn() }
	return <-done
}

var (
	mu      sync.Mutex
	forkers = map[int]chan func(){}
)

// forkerAt is the queue of the forking thread at niceness nice, started on first use.
func forkerAt(nice int) chan func() {
	mu.Lock()
	defer mu.Unlock()
	if t, ok := forkers[nice]; ok {
		return t
	}
	t := make(chan func())
	started := make(chan struct{})
	go forker(nice, t, started)
	<-started
	forkers[nice] = t
	return t
}

func forker(nice int, t chan func(), started chan struct{}) {
	runtime.LockOSThread() // never unlocked, and the goroutine never returns: the thread stays
	// Best effort: a thread that cannot be niced forks at the niceness it has.
	_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), nice)
	close(started)
	for fn := range t {
		fn()
	}
	select {} // unreachable: the queues are never closed
}
