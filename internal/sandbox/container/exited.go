package container

import (
	"os"

	"golang.org/x/sys/unix"
)

// watchExit starts watching the container's first process, the agent, through a
// duplicate of its pidfd (readable once the process has exited): Exited is closed then.
// It waits through the runtime's poller, so a sandbox costs no thread while its agent
// runs. Called once the pidfd is held, before anything else can use the sandbox.
func (sb *Sandbox) watchExit() {
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
	done := make(chan struct{})
	sb.AgentExited = done
	f := os.NewFile(uintptr(fd), "agent-pidfd")
	go func() {
		defer close(done)
		defer f.Close()
		rc, err := f.SyscallConn()
		if err != nil {
			return
		}
		// The poller reports the pidfd readable when the process has exited.
		_ = rc.Read(func(uintptr) bool {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, _ := unix.Poll(fds, 0)
			return n > 0
		})
	}()
}
