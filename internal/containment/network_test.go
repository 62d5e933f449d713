package containment

import (
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/testenv"
)

// countingListener accepts and drops connections, counting them: a connection that
// reached it from the sandbox would show up in the count even if the probe said nothing.
type countingListener struct {
	l net.Listener
	n atomic.Int64
}

func listen(t *testing.T, network, addr string) *countingListener {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	return count(t, l)
}

// count accepts (and closes) l's connections, counting them.
func count(t *testing.T, l net.Listener) *countingListener {
	c := &countingListener{l: l}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			c.n.Add(1)
			conn.Close()
		}
	}()
	return c
}

func (c *countingListener) port() string {
	_, p, _ := net.SplitHostPort(c.l.Addr().String())
	return p
}

// hostAddress is one of the host's own non-loopback IPv4 addresses, or "".
func hostAddress() string {
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback != 0 || i.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
				return n.IP.String()
			}
		}
	}
	return ""
}

// TestNetwork: the sandbox has loopback and nothing else. The host's listeners (on its
// loopback, on its own address, on an abstract Unix socket) are out of reach, nothing can be
// sent out, and name resolution fails at once. Probes aimed at outside addresses are
// guarded: they run only when lo is the sandbox's only interface, so they are refused by
// the kernel before anything leaves; the host's positive controls use 127.0.0.1 only.
func TestNetwork(t *testing.T) {
	h := newHarness(t)
	lo := listen(t, "tcp", "127.0.0.1:0")
	abstractName := "@paddock-containment-" + randHex(8)
	abstract := listen(t, "unix", abstractName)
	b := h.newBox(t, boxOpts{})

	loAddr := "127.0.0.1:" + lo.port()
	bashTCP := func(hostport string) string {
		host, port, _ := strings.Cut(hostport, ":")
		return fmt.Sprintf("bash -c 'exec 3<>/dev/tcp/%s/%s'", host, port)
	}
	checks := []check{
		{p: probe{Name: "network interfaces", Op: "read", Args: []string{"/proc/net/dev"}}, want: onlyLoopback, host: same(probe{Op: "read", Args: []string{"/proc/net/dev"}}), hostWant: outContains("lo:")},
		{p: probe{Name: "ip link", Op: "sh", Args: []string{"ip -o link"}}, want: func(t *testing.T, r result) {
			outContains("lo:")(t, r)
			if n := len(strings.Split(strings.TrimSpace(r.Out), "\n")); n != 1 {
				t.Errorf("ESCAPE: want lo alone, ip link shows %d interfaces: %s", n, r)
			}
		}},
		{p: probe{Name: "IPv4 routes", Op: "read", Args: []string{"/proc/net/route"}}, want: func(t *testing.T, r result) {
			if lines := strings.Split(strings.TrimSpace(r.Out), "\n"); !r.OK || len(lines) != 1 {
				t.Errorf("ESCAPE: want no IPv4 route at all (the header line alone): %s", r)
			}
		}},

		// The host's loopback: the sandbox's 127.0.0.1 is its own.
		{p: probe{Name: "dial the host's loopback listener", Op: "dial", Args: []string{"tcp", loAddr}}, want: denied("ECONNREFUSED"), host: same(probe{Op: "dial", Args: []string{"tcp", loAddr}})},
		{p: probe{Name: "bash /dev/tcp to the host's loopback listener", Op: "sh", Args: []string{bashTCP(loAddr)}}, want: denied(), host: same(probe{Op: "sh", Args: []string{bashTCP(loAddr)}})},
		{p: probe{Name: "bash /dev/tcp to a listener inside (control)", Op: "sh-listen", Args: []string{`bash -c 'exec 3<>/dev/tcp/127.0.0.1/$PORT'`}}, want: allowed},
		{p: probe{Name: "dial the host's abstract Unix socket", Op: "dial", Args: []string{"unix", abstractName}}, want: denied("ECONNREFUSED"), host: same(probe{Op: "dial", Args: []string{"unix", abstractName}})},

		// Outside: refused before anything leaves.
		{p: probe{Name: "UDP to 8.8.8.8:53", Op: "udp-send", Args: []string{"8.8.8.8:53"}, Guard: true}, want: denied("ENETUNREACH")},
		{p: probe{Name: "bash /dev/udp to 8.8.8.8:53", Op: "sh", Args: []string{"bash -c 'echo probe > /dev/udp/8.8.8.8/53'"}, Guard: true}, want: func(t *testing.T, r result) {
			denied()(t, r)
			if !strings.Contains(r.Out, "unreachable") {
				t.Errorf("want bash to report the network unreachable: %s", r)
			}
		}},
		{p: probe{Name: "TCP to 8.8.8.8:53", Op: "dial", Args: []string{"tcp", "8.8.8.8:53"}, Guard: true}, want: denied("ENETUNREACH")},
		{p: probe{Name: "curl a web site", Op: "sh", Args: []string{"curl -sS -m 5 http://example.com/"}, Guard: true}, want: denied()},
		{p: probe{Name: "resolve example.com", Op: "sh", Args: []string{"getent hosts example.com"}, Guard: true}, want: func(t *testing.T, r result) {
			denied()(t, r)
			if r.Millis > 2000 {
				t.Errorf("name resolution should fail at once, it took %d ms: %s", r.Millis, r)
			}
		}},
		{p: probe{Name: "resolve localhost (control)", Op: "sh", Args: []string{"getent hosts localhost"}}, want: outContains("localhost")},
		{p: probe{Name: "no proxy settings", Op: "read", Args: []string{"/proc/self/environ"}}, want: notShown("proxy", "PROXY")},

		// Sockets that get around a network namespace's addressing.
		{p: probe{Name: "raw ICMP socket", Op: "socket", Args: []string{"raw-icmp"}}, want: denied("EPERM"), host: same(probe{Op: "socket", Args: []string{"raw-icmp"}})},
		{p: probe{Name: "packet socket", Op: "socket", Args: []string{"packet"}}, want: denied("EPERM"), host: same(probe{Op: "socket", Args: []string{"packet"}})},
		{p: probe{Name: "vsock socket", Op: "socket", Args: []string{"vsock"}}, want: denied()},
	}
	if ip := hostAddress(); ip != "" {
		ext := listen(t, "tcp", ip+":0")
		extAddr := net.JoinHostPort(ip, ext.port())
		checks = append(checks,
			check{p: probe{Name: "dial the host's own address " + ip, Op: "dial", Args: []string{"tcp", extAddr}, Guard: true}, want: denied("ENETUNREACH")},
			check{p: probe{Name: "bash /dev/tcp to the host's own address", Op: "sh", Args: []string{bashTCP(extAddr)}, Guard: true}, want: denied()},
		)
		defer func() {
			if n := ext.n.Load(); n != 0 {
				t.Errorf("ESCAPE: the listener on the host's address %s accepted %d connections; the host made none", extAddr, n)
			}
		}()
	} else {
		t.Log("the host has no non-loopback IPv4 address: the probes at it are left out")
	}
	runChecks(t, b, checks)

	// Only the host's own controls reached the host's listeners.
	if n := lo.settle(2); n != 2 {
		t.Errorf("ESCAPE?: the host's loopback listener accepted %d connections, want the host controls' 2", n)
	}
	if n := abstract.settle(1); n != 1 {
		t.Errorf("ESCAPE?: the host's abstract socket accepted %d connections, want the host control's 1", n)
	}
}

// A sandbox whose network namespace the host made, to listen in it for its services
// (runc, runner.Config.HostPorts), is as closed as any: loopback alone, no route, the
// host's own loopback out of reach. The host's port in it cannot be taken over, neither
// by binding the same address nor the wildcard, with or without SO_REUSEADDR and
// SO_REUSEPORT, so that no process of the sandbox can stand in for the host's services.
func TestHostMadeNamespace(t *testing.T) {
	if underRunsc() {
		t.Skip("runsc: the sandbox's network is gVisor's netstack, not a namespace the host made and listens in; the host's ports are the agent's relay there (TestNetwork covers the rest)")
	}
	h := newHarness(t)
	const port = "4750"
	h.cfg.HostPorts = []int{4750}
	h.r = runner.New(h.cfg, testenv.Logger(t))
	hostLo := listen(t, "tcp", "127.0.0.1:0")
	b := h.newBox(t, boxOpts{})
	services := count(t, b.sb.Listen(4750, 2, testenv.Logger(t)))
	loAddr := "127.0.0.1:" + hostLo.port()
	runChecks(t, b, []check{
		{p: probe{Name: "network interfaces", Op: "read", Args: []string{"/proc/net/dev"}}, want: onlyLoopback},
		{p: probe{Name: "IPv4 routes", Op: "read", Args: []string{"/proc/net/route"}}, want: func(t *testing.T, r result) {
			if lines := strings.Split(strings.TrimSpace(r.Out), "\n"); !r.OK || len(lines) != 1 {
				t.Errorf("ESCAPE: want no IPv4 route at all (the header line alone): %s", r)
			}
		}},
		{p: probe{Name: "dial the host's services (control)", Op: "dial", Args: []string{"tcp", "127.0.0.1:" + port}}, want: allowed},
		{p: probe{Name: "listen on the host's services address", Op: "listen", Args: []string{"127.0.0.1:" + port}}, want: denied("EADDRINUSE")},
		{p: probe{Name: "listen on the wildcard at the services port", Op: "listen", Args: []string{"0.0.0.0:" + port}}, want: denied("EADDRINUSE")},
		{p: probe{Name: "listen on another port (control)", Op: "listen", Args: []string{"127.0.0.1:4761"}}, want: allowed},
		{p: probe{Name: "dial the host's loopback listener", Op: "dial", Args: []string{"tcp", loAddr}}, want: denied("ECONNREFUSED")},
		{p: probe{Name: "dial the host's services again (control)", Op: "dial", Args: []string{"tcp", "127.0.0.1:" + port}}, want: allowed},
	})
	if n := services.settle(2); n != 2 {
		t.Errorf("the host's services listener accepted %d connections, want the sandbox's 2", n)
	}
	if n := hostLo.settle(1); n != 0 {
		t.Errorf("ESCAPE: the host's loopback listener accepted %d connections from the sandbox", n)
	}
}

// settle gives the accept loop a moment to count connections already made, and returns
// the count.
func (c *countingListener) settle(want int64) int64 {
	for deadline := time.Now().Add(time.Second); c.n.Load() < want && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	return c.n.Load()
}

// onlyLoopback: /proc/net/dev lists lo and nothing else.
func onlyLoopback(t *testing.T, r result) {
	t.Helper()
	if !r.OK {
		t.Fatalf("CONTROL FAILED: %s", r)
	}
	var names []string
	for _, line := range strings.Split(r.Out, "\n") {
		if name, _, ok := strings.Cut(line, ":"); ok && !strings.Contains(name, "|") {
			names = append(names, strings.TrimSpace(name))
		}
	}
	if len(names) != 1 || names[0] != "lo" {
		t.Errorf("ESCAPE: want lo alone, the sandbox has interfaces %v", names)
	}
}
