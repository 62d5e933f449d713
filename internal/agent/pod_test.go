package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
	"github.com/paddockhq/paddock/internal/wire/channel"
	"github.com/paddockhq/paddock/internal/wire/podtls"
)

// startPodAgent runs BootstrapPod on a pod directory made as the control plane's Secret
// would be, for sandbox id with a pair the CA issued it, and returns the agent's address.
func startPodAgent(t *testing.T, ca *podtls.CA, id string) string {
	t.Helper()
	dir, ws := t.TempDir(), t.TempDir()
	addr := freeAddr(t)
	env := &wire.Envelope{Version: wire.EnvelopeVersion, SandboxID: id, Tier: wire.TierContainer, Workspace: ws,
		ListenAddr: addr, Env: []string{"PATH=/usr/bin:/bin"}}
	var buf bytes.Buffer
	if err := wire.WriteEnvelope(&buf, env); err != nil {
		t.Fatal(err)
	}
	pair, err := ca.IssueSandbox(id)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{wire.EnvelopeFile: buf.Bytes(), podtls.CertFile: pair.Cert, podtls.KeyFile: pair.Key, podtls.CAFile: ca.CertPEM()} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o400); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- BootstrapPod(ctx, dir, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	return addr
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// info calls the agent at addr over TLS with cfg, retrying while it starts to listen.
// The first call waits for the agent; a refused one gives up after its retries.
func info(t *testing.T, addr string, cfg *tls.Config, wait time.Duration) (*pb.InfoResponse, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, append(channel.DialOptions(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	return pb.NewAgentClient(conn).Info(c, &pb.InfoRequest{}, grpc.WaitForReady(true))
}

// TestPodChannelIsBoundToItsSandbox: the control plane reaches a pod's agent over TCP only
// with its own client certificate, and only as the sandbox that pod's Secret names.
func TestPodChannelIsBoundToItsSandbox(t *testing.T) {
	ca, err := podtls.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	cp, err := ca.IssueControlPlane()
	if err != nil {
		t.Fatal(err)
	}
	addrA := startPodAgent(t, ca, "sb-aaaaaaaaaa")
	cfgA, _ := ca.ClientConfig(cp, "sb-aaaaaaaaaa")
	got, err := info(t, addrA, cfgA, 30*time.Second)
	if err != nil || got.GetSandboxId() != "sb-aaaaaaaaaa" {
		t.Fatalf("the control plane calling A: %v, %v", got, err)
	}
	// The address of B is now A's pod: the control plane refuses to take it for B.
	cfgB, _ := ca.ClientConfig(cp, "sb-bbbbbbbbbb")
	if got, err := info(t, addrA, cfgB, 2*time.Second); err == nil {
		t.Fatalf("A's agent answered as B: %v", got)
	}
	// A client with no certificate of the control plane's is refused by the agent.
	bare := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: cfgA.RootCAs, ServerName: cfgA.ServerName}
	if got, err := info(t, addrA, bare, 2*time.Second); err == nil {
		t.Fatalf("the agent served a client without a certificate: %v", got)
	}
	// So is another sandbox's pair presented as a client.
	b, _ := ca.IssueSandbox("sb-bbbbbbbbbb")
	asB, _ := ca.ClientConfig(b, "sb-aaaaaaaaaa")
	if got, err := info(t, addrA, asB, 2*time.Second); err == nil {
		t.Fatalf("the agent served sandbox B's certificate: %v", got)
	}
}

func TestPodRefusesAnEnvelopeWithoutAddress(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	env := &wire.Envelope{Version: wire.EnvelopeVersion, SandboxID: "sb-x", Tier: wire.TierContainer, Workspace: "/w", ListenFD: 3}
	if err := wire.WriteEnvelope(&buf, env); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, wire.EnvelopeFile), buf.Bytes(), 0o400); err != nil {
		t.Fatal(err)
	}
	err := BootstrapPod(context.Background(), dir, slog.New(slog.DiscardHandler))
	if err == nil || errors.Is(err, context.Canceled) {
		t.Fatalf("an envelope without listen_addr: %v", err)
	}
}
