package runner_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/testenv"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

const servicesPort = 4750

// serveHello answers every connection l accepts with "hello from the host", and sends
// each connection's remote address on addrs.
func serveHello(l net.Listener, addrs chan<- net.Addr) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		select {
		case addrs <- c.RemoteAddr():
		default:
		}
		fmt.Fprintln(c, "hello from the host")
		c.Close()
	}
}

// askHost connects from inside the sandbox to the services port on its own loopback, as
// any process there would, and returns what it read.
func askHost(t *testing.T, sb *runner.Sandbox) string {
	t.Helper()
	res, err := sb.Agent().Process().Execute(tctx(t), &pb.ExecuteRequest{Argv: []string{"bash", "-c",
		fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && cat <&3", servicesPort)}})
	if err != nil {
		t.Fatal(err)
	}
	return string(res.Stdout) + string(res.Stderr)
}

// The host's services reach a sandbox's processes on their own loopback. Under runc the
// host listens there itself, in the sandbox's network namespace, bound before the
// container starts: the connection arrives straight from the sandbox's loopback, with no
// relay. Under runsc (whose loopback is gVisor's) the agent relays it over the channel.
// Either way the app on the sandbox's loopback is reached with DialPort.
func TestHostPorts(t *testing.T) {
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			testenv.RequireRoot(t)
			cfg := testenv.Config(t)
			cfg.HostPorts = []int{servicesPort}
			r := runner.New(cfg, testenv.Logger(t))
			sb, err := r.Create(tctx(t), runner.Spec{User: "hp", Runtime: rt, Main: wire.WelcomeCommand(wire.AgentPath, 8080),
				Env: []string{fmt.Sprintf("%s=http://127.0.0.1:%d", wire.ServicesEnv, servicesPort)}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := sb.Destroy(context.Background()); err != nil {
					t.Errorf("destroy: %v", err)
				}
			})
			l := sb.Listen(servicesPort, 2, testenv.Logger(t))
			defer l.Close()
			addrs := make(chan net.Addr, 1)
			go serveHello(l, addrs)
			if got := askHost(t, sb); got != "hello from the host\n" {
				t.Fatalf("a process in the sandbox read %q", got)
			}
			addr := <-addrs
			tcp, direct := addr.(*net.TCPAddr)
			if want := rt == "runc"; direct != want || (direct && !tcp.IP.IsLoopback()) {
				t.Errorf("connection from %v (%T); want a direct one from the sandbox's loopback: %v", addr, addr, want)
			}

			waitListening(t, sb, 8080)
			c, err := sb.DialPort(tctx(t), 8080)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(c, "GET /api/info HTTP/1.0\r\nHost: x\r\n\r\n")
			status, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if !strings.Contains(status, "200") {
				t.Fatalf("GET /api/info through DialPort: %q", status)
			}
		})
	}
}

// A control plane that restarts listens again in the sandboxes it adopts.
func TestHostPortsAfterAdoption(t *testing.T) {
	testenv.RequireRoot(t)
	cfg := testenv.Config(t)
	cfg.HostPorts = []int{servicesPort}
	first := runner.New(cfg, testenv.Logger(t))
	id := runner.NewID()
	sb, err := first.Create(tctx(t), runner.Spec{ID: id, Persistent: true, User: "hpa", Main: []string{"sleep", "600"},
		Env: []string{fmt.Sprintf("%s=http://127.0.0.1:%d", wire.ServicesEnv, servicesPort)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.RemoveWorkspace("hpa", id) })
	// The old control plane dies: its listener and its channel with it; the container stays.
	sb.Listen(servicesPort, 2, testenv.Logger(t)).Close()
	sb.Agent().Close()

	second := runner.New(cfg, testenv.Logger(t))
	got, err := second.Adopt(tctx(t), runner.Record{ID: id, User: "hpa", Tier: wire.TierContainer})
	if err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	t.Cleanup(func() { _ = got.Destroy(context.Background()) })
	l := got.Listen(servicesPort, 2, testenv.Logger(t))
	defer l.Close()
	go serveHello(l, nil)
	if out := askHost(t, got); out != "hello from the host\n" {
		t.Fatalf("after adoption a process in the sandbox read %q", out)
	}
}
