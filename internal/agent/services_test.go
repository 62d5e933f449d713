package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/tunnel"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// freePort returns a loopback port nothing listens on (the agent under test listens there).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// The host serves HTTP on the Listener; a process in the sandbox (here: the test, which
// shares the agent's network namespace) reaches it at PADDOCK_SERVICES_URL, many requests
// at once, bodies both ways intact.
func TestServicesRelay(t *testing.T) {
	port := freePort(t)
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	conn, _ := startAgentEnv(t, wire.TierContainer, nil, wire.ServicesEnv+"="+url)
	waitServing(t, conn)
	l := tunnel.Listen(conn, port, 2, slog.New(slog.DiscardHandler))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %d %x", r.Method, r.URL.Path, len(body), sumBytes(body))
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close(); l.Close() })

	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := bytes.Repeat([]byte{byte(i)}, 100<<10*i)
			resp, err := http.Post(url+"/v1/x", "application/octet-stream", bytes.NewReader(body))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			got, _ := io.ReadAll(resp.Body)
			if want := fmt.Sprintf("POST /v1/x %d %x", len(body), sumBytes(body)); string(got) != want {
				errs <- fmt.Errorf("got %q, want %q", got, want)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// waitServing returns once the agent answers: it listens for the host's services before.
func waitServing(t *testing.T, conn *grpc.ClientConn) {
	t.Helper()
	if _, err := pb.NewAgentClient(conn).Info(ctx(t), &pb.InfoRequest{}); err != nil {
		t.Fatal(err)
	}
}

func sumBytes(b []byte) uint32 {
	var s uint32
	for _, c := range b {
		s = s*31 + uint32(c)
	}
	return s
}

// Without a services address the host's Listener stops at once and says why, instead of
// retrying for ever.
func TestServicesUnconfigured(t *testing.T) {
	conn, _ := startAgent(t, nil)
	l := tunnel.Listen(conn, 4750, 2, slog.New(slog.DiscardHandler))
	defer l.Close()
	done := make(chan error, 1)
	go func() { _, err := l.Accept(); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), wire.ServicesEnv+" is not set") {
			t.Fatalf("Accept: %v, want failed precondition naming %s", err, wire.ServicesEnv)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept did not fail")
	}
}

// A connection nobody on the host takes is closed after servicesWait, and the agent keeps
// answering.
func TestServicesNobodyAccepts(t *testing.T) {
	old := servicesWait
	servicesWait = 100 * time.Millisecond
	t.Cleanup(func() { servicesWait = old })
	port := freePort(t)
	conn, _ := startAgentEnv(t, wire.TierContainer, nil, fmt.Sprintf("%s=http://127.0.0.1:%d", wire.ServicesEnv, port))
	waitServing(t, conn)
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("Read: %v, want EOF once the wait is over", err)
	}
}
