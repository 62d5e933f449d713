// Package netns lets the host own sockets inside a sandbox's network namespace: a listener
// that the sandbox's processes connect to on their own loopback, and connections to a port
// the sandbox listens on, with no relay in between.
//
// A socket belongs to the network namespace of the thread that created it, for its whole
// life, wherever the file descriptor goes afterwards. So the host creates a namespace (New)
// or opens a sandbox's (Open), and each Listen or Dial runs on an OS thread that enters the
// namespace only for the few system calls that make the socket, then leaves it. The
// sockets themselves are ordinary ones served by Go's poller from any thread.
//
// Why: a relay in the sandbox's agent (read a connection's bytes in the sandbox, frame
// them over the agent's channel, unframe them on the host) costs two more processes'
// worth of reads, writes and context switches per request, a large part of the cost of a
// request to the secrets broker (docs/benchmarks.md, tables 5 and 8). Identity
// does not change: a listener made in sandbox A's namespace can be reached only from A's
// namespace, so every connection it accepts is A's, whatever the bytes say.
//
// Only the container tier under runc shares its namespace this way: gVisor (runsc) runs
// its own network stack, whose loopback is not the namespace's, and a microVM has its own
// kernel. Those keep the agent's relay.
package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Handle is an open network namespace. It keeps the namespace alive while open, even
// with no process in it.
type Handle struct {
	f *os.File
}

// New makes a new network namespace with its loopback up and nothing else: no route
// anywhere but to itself.
func New() (*Handle, error) {
	var h *Handle
	err := onThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare the network namespace: %w", err)
		}
		f, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			return err
		}
		if err := loopbackUp(); err != nil {
			f.Close()
			return err
		}
		h = &Handle{f: f}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("new network namespace: %w", err)
	}
	return h, nil
}

// Open opens the network namespace at path (such as /proc/PID/ns/net). It fails unless
// path is a network namespace.
func Open(path string) (*Handle, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open network namespace: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil || st.Type != unix.NSFS_MAGIC {
		f.Close()
		return nil, fmt.Errorf("open network namespace: %s is not a namespace", path)
	}
	if t, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_NSTYPE); err != nil || t != unix.CLONE_NEWNET {
		f.Close()
		return nil, fmt.Errorf("open network namespace: %s is not a network namespace", path)
	}
	return &Handle{f: f}, nil
}

// Path names the namespace for another process of this host, such as runc joining it:
// this process's descriptor of it, under /proc. It is valid while h is open.
func (h *Handle) Path() string {
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), h.f.Fd())
}

// Close releases the namespace; it ends when no process or socket holds it any more.
func (h *Handle) Close() error { return h.f.Close() }

// Listen listens on a TCP address inside the namespace.
func (h *Handle) Listen(addr string) (*net.TCPListener, error) {
	var l net.Listener
	err := h.do(func() (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		return nil, err
	}
	return l.(*net.TCPListener), nil
}

// Dial connects to a TCP address inside the namespace.
func (h *Handle) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var c net.Conn
	err := h.do(func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", addr)
		return err
	})
	return c, err
}

// do runs fn on a thread inside the namespace. The descriptor is used under
// RawConn.Control, which holds it open: a Close racing a Dial waits for setns to be done
// instead of letting the number be closed and reused — by another sandbox's namespace,
// say — between the read and the call. After Close, do fails.
func (h *Handle) do(fn func() error) error {
	rc, err := h.f.SyscallConn()
	if err != nil {
		return fmt.Errorf("enter the sandbox's network namespace: %w", err)
	}
	return onThread(func() error {
		var serr error
		if err := rc.Control(func(fd uintptr) { serr = unix.Setns(int(fd), unix.CLONE_NEWNET) }); err != nil {
			// The only way Control fails on an open file's: it was closed.
			return fmt.Errorf("enter the sandbox's network namespace: %v: %w", err, os.ErrClosed)
		}
		if serr != nil {
			return fmt.Errorf("enter the sandbox's network namespace: %w", serr)
		}
		return fn()
	})
}

// onThread runs fn on an OS thread of its own, locked for fn's duration, and puts the
// thread back in the process's network namespace afterwards. If that fails the thread
// stays locked, and Go ends it with the goroutine rather than run other code in the wrong
// namespace.
func onThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer home.Close()
		ferr := fn()
		if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("return to the host's network namespace: %w", err))
			return // the thread stays locked and dies with this goroutine
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// loopbackUp brings up lo in the calling thread's network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring loopback up: %w", err)
	}
	return nil
}
