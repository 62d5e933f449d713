package container

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/netns"
)

// hostNet is what the host holds in a runc sandbox's network namespace: the namespace
// itself, and its listeners on the sandbox's loopback (Config.HostPorts).
//
// Under runc the host makes the namespace (loopback only) and binds the listeners before
// the container starts and joins it, so that they are there before any process of the
// sandbox could be: a process that wanted one of those ports finds it taken, and the
// sandbox's app, which may ask the broker for a secret as it starts, never finds the
// port closed. Under runsc the namespace's loopback is not the sandbox's (gVisor has its
// own network stack), so there is no hostNet and the agent relays.
// It is set when the sandbox starts (or is adopted) and never changed after, so Dial and
// Listener read it without a lock while Destroy closes it.
type hostNet struct {
	ns        *netns.Handle
	listeners map[int]*net.TCPListener
	closeOnce sync.Once
}

// newHostNet makes a namespace with listeners on ports.
func newHostNet(ports []int) (*hostNet, error) {
	ns, err := netns.New()
	if err != nil {
		return nil, err
	}
	hn := &hostNet{ns: ns, listeners: map[int]*net.TCPListener{}}
	if err := hn.listen(ports); err != nil {
		hn.close()
		return nil, err
	}
	return hn, nil
}

// adoptHostNet opens the namespace of a running container's first process, held by pidfd,
// and listens on ports again (the listeners died with the previous control plane). A port
// that something in the sandbox took meanwhile fails the adoption's listeners but not the
// sandbox: the caller's services fall back to the agent's relay, which also fails for
// that port, and the sandbox's processes reach only what they bound themselves.
func adoptHostNet(pid, pidfd int, ports []int) (*hostNet, error) {
	ns, err := netns.Open("/proc/" + strconv.Itoa(pid) + "/ns/net")
	if err != nil {
		return nil, err
	}
	// The pid could have been reused between reading it and opening its namespace; the
	// pidfd says whether the process it names still lives.
	if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
		ns.Close()
		return nil, fmt.Errorf("the sandbox's first process is gone: %w", err)
	}
	hn := &hostNet{ns: ns, listeners: map[int]*net.TCPListener{}}
	err = hn.listen(ports)
	return hn, err
}

func (hn *hostNet) listen(ports []int) error {
	var errs []error
	for _, p := range ports {
		l, err := hn.ns.Listen(net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			errs = append(errs, fmt.Errorf("listen on port %d in the sandbox: %w", p, err))
			continue
		}
		hn.listeners[p] = l
	}
	return errors.Join(errs...)
}

// close closes the listeners and the namespace's handle, once; a Dial after it fails.
func (hn *hostNet) close() {
	hn.closeOnce.Do(func() {
		for _, l := range hn.listeners {
			l.Close()
		}
		hn.ns.Close()
	})
}

// Listener is the host's listener on port of the sandbox's loopback, or nil when the host
// does not listen there itself (see Config.HostPorts). The sandbox owns it: Destroy
// closes it.
func (sb *Sandbox) Listener(port int) net.Listener {
	if sb.net == nil {
		return nil
	}
	if l, ok := sb.net.listeners[port]; ok {
		return l
	}
	return nil
}

// Dial connects to port on the sandbox's loopback from the host, directly, where the
// sandbox shares its network namespace with the host (runc); elsewhere it fails with
// errdefs.ErrUnavailable and the caller goes through the agent.
func (sb *Sandbox) Dial(ctx context.Context, port int) (net.Conn, error) {
	if sb.net == nil {
		return nil, fmt.Errorf("sandbox %s: its network is not reachable from the host: %w", sb.ID, errdefs.ErrUnavailable)
	}
	c, err := sb.net.ns.Dial(ctx, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("port %d in sandbox %s: %w", port, sb.ID, err)
	}
	return c, nil
}
