package container

import (
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// exitWatch closes a channel when the container's first process, the agent, has exited.
// It waits through the runtime's poller on a duplicate of the pidfd (readable once the
// process has exited), so a sandbox costs no thread while its agent runs.
type exitWatch struct {
	once sync.Once
	done chan struct{}
}

// Exited is closed once the agent has exited: killed (by the memory limit, say), crashed,
// or ended by Destroy. Without a hold on the agent's process it is never closed.
func (sb *Sandbox) Exited() <-chan struct{} {
	sb.watch.once.Do(func() {
		sb.watch.done = make(chan struct{})
		if sb.init < 0 {
			return
		}
		fd, err := unix.FcntlInt(uintptr(sb.init), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return
		}
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
			return
		}
		f := os.NewFile(uintptr(fd), "agent-pidfd")
		go func() {
			defer close(sb.watch.done)
			defer f.Close()
			rc, err := f.SyscallConn()
			if err != nil {
				return
			}
			// The poller reports the pidfd readable when the process has exited.
			_ = rc.Read(func(uintptr) bool {
				var fds = []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
				n, _ := unix.Poll(fds, 0)
				return n > 0
			})
		}()
	})
	return sb.watch.done
}
