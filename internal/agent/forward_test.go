package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/tunnel"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// serveTCP runs handle for every connection to a fresh loopback port (the "app" in the
// sandbox: in these tests, the agent's network namespace is the test's) and returns the port.
func serveTCP(t testing.TB, handle func(*net.TCPConn)) int {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		lis.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c.(*net.TCPConn))
			}()
		}
	}()
	return lis.Addr().(*net.TCPAddr).Port
}

// echoApp echoes until EOF, then closes its side.
func echoApp(c *net.TCPConn) {
	_, _ = io.Copy(c, c)
	_ = c.CloseWrite()
}

func dialTunnel(t testing.TB, conn *grpc.ClientConn, port int) net.Conn {
	t.Helper()
	c, err := tunnel.Dial(t.Context(), conn, port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestForwardEcho(t *testing.T) {
	conn, _ := startAgent(t, nil)
	c := dialTunnel(t, conn, serveTCP(t, echoApp))
	for _, msg := range []string{"hello", strings.Repeat("x", 100_000), "bye"} {
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
			t.Fatalf("echo of %d bytes: %v (got %d bytes)", len(msg), err, len(got))
		}
	}
}

// The caller's half-close reaches the app as EOF, and the app's answer after it still
// reaches the caller, followed by EOF when the app closes.
func TestForwardHalfClose(t *testing.T) {
	conn, _ := startAgent(t, nil)
	port := serveTCP(t, func(c *net.TCPConn) {
		n, _ := io.Copy(io.Discard, c)
		fmt.Fprintf(c, "read %d bytes", n)
	})
	c := dialTunnel(t, conn, port)
	if _, err := c.Write(make([]byte, 12345)); err != nil {
		t.Fatal(err)
	}
	if err := c.(*tunnel.Conn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Write after CloseWrite: %v, want ErrFailedPrecondition", err)
	}
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "read 12345 bytes" {
		t.Fatalf("answer %q, %v", got, err)
	}
}

// Close delivers what was written, then the app reads EOF, as with a socket.
func TestForwardCloseDelivers(t *testing.T) {
	conn, _ := startAgent(t, nil)
	got := make(chan []byte, 1)
	port := serveTCP(t, func(c *net.TCPConn) {
		b, _ := io.ReadAll(c)
		got <- b
	})
	c, err := tunnel.Dial(t.Context(), conn, port)
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("0123456789"), 100_000)
	if _, err := c.Write(want); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Read after Close: %v, want net.ErrClosed", err)
	}
	select {
	case b := <-got:
		if !bytes.Equal(b, want) {
			t.Fatalf("app read %d bytes, want %d", len(b), len(want))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("app did not read EOF after Close")
	}
}

// 64 MiB each way at once, checked by hash.
func TestForwardLargeTransfer(t *testing.T) {
	conn, _ := startAgent(t, nil)
	c := dialTunnel(t, conn, serveTCP(t, echoApp))
	const size = 64 << 20
	sent := sha256.New()
	werr := make(chan error, 1)
	go func() {
		src := io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{1}), size), sent)
		_, err := io.CopyBuffer(c, src, make([]byte, 100_000)) // not a multiple of a chunk
		if err == nil {
			err = c.(*tunnel.Conn).CloseWrite()
		}
		werr <- err
	}()
	got := sha256.New()
	n, err := io.Copy(got, c)
	if err != nil || n != size {
		t.Fatalf("read %d bytes, %v; want %d", n, err, size)
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sent.Sum(nil), got.Sum(nil)) {
		t.Fatal("what came back differs from what was sent")
	}
}

func TestForwardConcurrent(t *testing.T) {
	conn, _ := startAgent(t, nil)
	port := serveTCP(t, echoApp)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			c, err := tunnel.Dial(t.Context(), conn, port)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			want := bytes.Repeat([]byte{byte(i)}, 1<<20)
			go func() {
				_, _ = c.Write(want)
				_ = c.(*tunnel.Conn).CloseWrite()
			}()
			got, err := io.ReadAll(c)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("stream %d: read %d bytes, %v", i, len(got), err)
			}
		})
	}
	wg.Wait()
}

// The first response says the agent has connected; a port nobody listens on fails the
// stream with Unavailable naming the port.
func TestForwardDial(t *testing.T) {
	conn, _ := startAgent(t, nil)
	nc := pb.NewNetClient(conn)
	t.Run("connected", func(t *testing.T) {
		s, err := nc.Forward(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(&pb.ForwardRequest{Port: uint32(serveTCP(t, echoApp)), Data: []byte("early")}); err != nil {
			t.Fatal(err)
		}
		if r, err := s.Recv(); err != nil || !r.Connected || len(r.Data) != 0 {
			t.Fatalf("first response %v, %v: want connected alone", r, err)
		}
		if r, err := s.Recv(); err != nil || string(r.Data) != "early" {
			t.Fatalf("echo of the first request's data: %v, %v", r, err)
		}
		if err := s.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if r, err := s.Recv(); err != io.EOF {
			t.Fatalf("after the app closed: %v, %v; want EOF", r, err)
		}
	})
	port := closedPort(t)
	tests := []struct {
		name string
		port uint32
		code codes.Code
		msg  string
	}{
		{"nothing listening", uint32(port), codes.Unavailable, fmt.Sprintf("nothing listening on port %d in the sandbox", port)},
		{"port 0", 0, codes.InvalidArgument, "port 0"},
		{"port too large", 70000, codes.InvalidArgument, "port 70000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := nc.Forward(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Send(&pb.ForwardRequest{Port: tt.port}); err != nil {
				t.Fatal(err)
			}
			_, err = s.Recv()
			if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.msg) {
				t.Fatalf("got %v, want %s saying %q", err, tt.code, tt.msg)
			}
		})
	}
	t.Run("tunnel", func(t *testing.T) {
		_, err := tunnel.Dial(ctx(t), conn, port)
		if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "nothing listening") {
			t.Fatalf("Dial: %v, want ErrUnavailable saying nothing is listening", err)
		}
	})
}

// closedPort is a loopback port that nothing listens on.
func closedPort(t testing.TB) int {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	lis.Close()
	return port
}

// In the process tier the agent shares the host's network namespace: forwarding there would
// reach the host's own services, so it is refused even to a port that is listening.
func TestForwardRefusedInProcessTier(t *testing.T) {
	conn, _ := startAgentTier(t, wire.TierProcess, nil)
	port := serveTCP(t, echoApp) // a "host service"
	s, err := pb.NewNetClient(conn).Forward(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Send(&pb.ForwardRequest{Port: uint32(port)})
	_, err = s.Recv()
	if status.Code(err) != codes.Unavailable || status.Convert(err).Message() != ProcessTierForwardReason+": unavailable" {
		t.Fatalf("Forward in the process tier: %v, want Unavailable with the process-tier reason", err)
	}
	if _, err := tunnel.Dial(ctx(t), conn, port); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "process tier") {
		t.Fatalf("Dial: %v, want ErrUnavailable naming the process tier", err)
	}
}

// When the app closes, the caller reads EOF; when the caller goes away, the app's
// connection is closed; and nothing of either stays behind.
func TestForwardEndsCleanly(t *testing.T) {
	conn, _ := startAgent(t, nil)
	appDone := make(chan error, 64)
	greeter := serveTCP(t, func(c *net.TCPConn) { _, _ = c.Write([]byte("hi")) })
	waiter := serveTCP(t, func(c *net.TCPConn) {
		_, err := io.Copy(io.Discard, c)
		appDone <- err
	})
	dialTunnel(t, conn, greeter).Close() // warm up grpc's own goroutines
	base := runtime.NumGoroutine()
	for range 20 {
		c, err := tunnel.Dial(ctx(t), conn, greeter)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := io.ReadAll(c); err != nil || string(b) != "hi" {
			t.Fatalf("read %q, %v; want hi then EOF", b, err)
		}
		c.Close()
		c, err = tunnel.Dial(ctx(t), conn, waiter)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		select {
		case err := <-appDone:
			if err != nil {
				t.Fatalf("app: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the app's connection stayed open after the caller closed")
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines, %d before the tunnels:\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}
}

// Cancelling the call closes the app's connection at once, even while the app is sending.
func TestForwardCancel(t *testing.T) {
	conn, _ := startAgent(t, nil)
	appDone := make(chan struct{})
	port := serveTCP(t, func(c *net.TCPConn) {
		defer close(appDone)
		_, _ = io.Copy(c, rand.NewChaCha8([32]byte{}))
	})
	c, cancel := ctxCancel(t)
	s, err := pb.NewNetClient(conn).Forward(c)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Send(&pb.ForwardRequest{Port: uint32(port)})
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-appDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the app's connection stayed open after the call was cancelled")
	}
}

func TestSandboxIDInEnvironment(t *testing.T) {
	conn, _ := startAgent(t, nil)
	resp, err := pb.NewProcessClient(conn).Execute(ctx(t), &pb.ExecuteRequest{Argv: []string{"sh", "-c", "echo $" + wire.SandboxIDEnv}})
	if err != nil || string(resp.Stdout) != "sb-test\n" {
		t.Fatalf("%s in a session: %q, %v", wire.SandboxIDEnv, resp.GetStdout(), err)
	}
}

func ctxCancel(t *testing.T) (context.Context, context.CancelFunc) {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c, cancel
}
