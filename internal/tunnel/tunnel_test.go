package tunnel_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/net/nettest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/paddockhq/paddock/internal/agent"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/tunnel"
	"github.com/paddockhq/paddock/internal/wire"
	"github.com/paddockhq/paddock/internal/wire/channel"
)

// startAgent serves a real agent on a Unix socket, as the runner does; the tests' "apps"
// listen on the loopback the agent shares with them.
func startAgent(t *testing.T) *grpc.ClientConn {
	t.Helper()
	dir := t.TempDir()
	lis, err := net.Listen("unix", filepath.Join(dir, "agent.sock"))
	if err != nil {
		t.Fatal(err)
	}
	env := &wire.Envelope{Version: wire.EnvelopeVersion, SandboxID: "sb-tunnel", Tier: wire.TierContainer, Workspace: dir, ListenFD: 3}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx, env, lis, nil, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	conn, err := grpc.NewClient("unix://"+lis.Addr().String(), append(channel.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// pipe makes a tunnel (c1) and the app's end of the connection it reaches (c2).
func pipe(t *testing.T, conn *grpc.ClientConn) (c1, c2 net.Conn, stop func(), err error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, nil, err
	}
	defer lis.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := lis.Accept()
		accepted <- c
	}()
	c1, err = tunnel.Dial(t.Context(), conn, lis.Addr().(*net.TCPAddr).Port)
	if err != nil {
		return nil, nil, nil, err
	}
	c2 = <-accepted
	return c1, c2, func() { c1.Close(); c2.Close() }, nil
}

// The tunnel passes x/net's conformance suite for net.Conn: I/O, deadlines (past, present,
// future), Close unblocking, concurrent methods.
func TestConn(t *testing.T) {
	conn := startAgent(t)
	nettest.TestConn(t, func() (net.Conn, net.Conn, func(), error) { return pipe(t, conn) })
}

// A deadline wakes a blocked Read; a later deadline lets the conn carry on.
func TestReadDeadline(t *testing.T) {
	c1, c2, stop, err := pipe(t, startAgent(t))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	start := time.Now()
	c1.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	_, err = c1.Read(make([]byte, 10))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read past the deadline: %v, want a timeout", err)
	}
	if d := time.Since(start); d < 90*time.Millisecond || d > 5*time.Second {
		t.Fatalf("Read returned after %s, want about 100ms", d)
	}
	c1.SetReadDeadline(time.Time{})
	go c2.Write([]byte("late"))
	b := make([]byte, 4)
	if _, err := io.ReadFull(c1, b); err != nil || string(b) != "late" {
		t.Fatalf("Read after clearing the deadline: %q, %v", b, err)
	}
}

// An app that does not read makes Write block, and the write deadline ends it.
func TestWriteDeadline(t *testing.T) {
	c1, _, stop, err := pipe(t, startAgent(t))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	c1.SetWriteDeadline(time.Now().Add(500 * time.Millisecond))
	buf := make([]byte, 1<<20)
	var total int
	for {
		n, err := c1.Write(buf)
		total += n
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("Write: %v, want a timeout", err)
			}
			break
		}
		if total > 1<<30 {
			t.Fatal("1 GiB written to an app that reads nothing: no back-pressure")
		}
	}
	t.Logf("%d MiB queued before Write blocked", total>>20)
}

func TestAddrs(t *testing.T) {
	c1, _, stop, err := pipe(t, startAgent(t))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	r := c1.RemoteAddr()
	if host, port, err := net.SplitHostPort(r.String()); err != nil || host != "sandbox" || port == "0" || r.Network() != "paddock-tunnel" {
		t.Fatalf("RemoteAddr %s %q", r.Network(), r)
	}
	if _, _, err := net.SplitHostPort(c1.LocalAddr().String()); err != nil {
		t.Fatalf("LocalAddr %q", c1.LocalAddr())
	}
}

func TestDialErrors(t *testing.T) {
	conn := startAgent(t)
	if _, err := tunnel.Dial(t.Context(), conn, 0); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("port 0: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := tunnel.Dial(ctx, conn, 80); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled dial: %v", err)
	}
}
