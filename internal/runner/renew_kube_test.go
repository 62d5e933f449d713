//go:build kube

package runner_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandbox/kube"
	"github.com/paddockhq/paddock/internal/sandbox/kube/kubetest"
	"github.com/paddockhq/paddock/internal/testenv"
	testkube "github.com/paddockhq/paddock/internal/testenv/kube"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
	"github.com/paddockhq/paddock/internal/wire/channel"
	"github.com/paddockhq/paddock/internal/wire/podtls"
)

// TestClusterCertificateRenewal: with a short certificate lifetime, a sandbox runs past
// the end of the certificate it started with: the control plane writes it a new one into
// its Secret, the agent presents it from its next connection on, and the control plane's
// own channel, cut and made again after the first certificate expired, still runs
// commands. The new certificate still names that sandbox alone; the expired one, and an
// expired control plane certificate, are refused.
func TestClusterCertificateRenewal(t *testing.T) {
	testenv.RequireRoot(t)
	const life = 2 * time.Minute
	cfg := kubetest.Config(t, testenv.Config(t))
	cfg.Cluster.CertLifetime = life
	t.Cleanup(func() {
		for _, o := range kubetest.Leftovers(t) {
			t.Errorf("left on the cluster: %s", o)
		}
	})
	r := runner.New(cfg, testenv.Logger(t))
	sb := createOn(t, r, runner.Spec{User: "renew"})
	defer sb.Destroy(context.Background())
	ca, err := kube.LoadCA(cfg.Cluster.CADir)
	if err != nil {
		t.Fatal(err)
	}
	ca.Lifetime = life
	oldCP, err := ca.IssueControlPlane() // ends with the sandbox's first certificate
	if err != nil {
		t.Fatal(err)
	}
	secret, err := testkube.Shared(t).Client.CoreV1().Secrets(kubetest.Namespace).Get(context.Background(), kube.SecretName(sb.ID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first := podtls.Pair{Cert: secret.Data[podtls.CertFile], Key: secret.Data[podtls.KeyFile]}
	firstEnd, err := podtls.NotAfter(first)
	if err != nil {
		t.Fatal(err)
	}
	if got := time.Until(firstEnd); got > life || got < life/2 {
		t.Fatalf("the first certificate lasts %s more, want about %s", got, life)
	}
	ip := podIP(t, sb.ID)
	addr := net.JoinHostPort(ip, strconv.Itoa(wire.PodAgentPort))
	dial := func(cfg *tls.Config) (*x509.Certificate, error) {
		d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second}, Config: cfg}
		c, err := d.DialContext(context.Background(), "tcp", addr)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		return c.(*tls.Conn).ConnectionState().PeerCertificates[0], nil
	}
	current := func(id string) *tls.Config {
		cp, err := ca.IssueControlPlane()
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := ca.ClientConfig(cp, id)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}

	// The agent presents a renewed certificate before the first one ends.
	var renewed *x509.Certificate
	for renewed == nil {
		if time.Now().After(firstEnd) {
			t.Fatalf("the agent still presented its first certificate when it expired at %s", firstEnd)
		}
		got, err := dial(current(sb.ID))
		if err != nil {
			t.Fatalf("the control plane dialing the agent before its first certificate expired: %v", err)
		}
		if got.NotAfter.After(firstEnd) {
			renewed = got
		}
		time.Sleep(time.Second)
	}
	if len(renewed.DNSNames) != 1 || renewed.DNSNames[0] != podtls.ServerName(sb.ID) {
		t.Fatalf("the renewed certificate names %v, want only %s", renewed.DNSNames, podtls.ServerName(sb.ID))
	}
	time.Sleep(time.Until(firstEnd) + 2*time.Second)

	// The runner's channel, cut and made again: a new handshake each way, after the
	// certificates both sides started with have expired.
	if out := execIn(t, sb, "id", "-u"); out != "1000\n" {
		t.Fatalf("exec on the first connection: %q", out)
	}
	if out, err := exec.Command("ss", "-K", "dst", ip, "dport", "=", strconv.Itoa(wire.PodAgentPort)).CombinedOutput(); err != nil {
		t.Fatalf("ss -K: %v: %s", err, out)
	}
	var res *pb.ExecuteResponse
	for deadline := time.Now().Add(2 * time.Minute); res == nil; time.Sleep(500 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		res, err = sb.Agent().Process().Execute(ctx, &pb.ExecuteRequest{Argv: []string{"id", "-u"}}, grpc.WaitForReady(true))
		cancel()
		if err != nil && time.Now().After(deadline) {
			t.Fatalf("exec after the channel was made again: %v", err)
		}
	}
	if string(res.GetStdout()) != "1000\n" {
		t.Fatalf("exec after the channel was made again: %+v", res)
	}

	// Pinning: the renewed certificate answers for this sandbox, and for no other.
	if got, err := dial(current(sb.ID)); err != nil || got.NotAfter.Before(renewed.NotAfter) {
		t.Fatalf("a fresh connection after renewal: %v, %v", got, err)
	}
	conn, err := grpc.NewClient(addr, append(channel.DialOptions(), grpc.WithTransportCredentials(credentials.NewTLS(current(sb.ID))))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if info, err := pb.NewAgentClient(conn).Info(ctx, &pb.InfoRequest{}); err != nil || info.GetSandboxId() != sb.ID {
		t.Fatalf("Info after renewal: %v %v", info, err)
	}
	if _, err := dial(current(runner.NewID())); err == nil {
		t.Fatal("the renewed certificate answered for another sandbox")
	}

	// Expired: the agent's first certificate is refused by the control plane, and the
	// agent refuses a control plane certificate that has expired.
	l, err := tls.Listen("tcp", "127.0.0.1:0", must(podtls.ServerConfig(first, ca.CertPEM())))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		if c, err := l.Accept(); err == nil {
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	_, err = tls.Dial("tcp", l.Addr().String(), current(sb.ID))
	var inv x509.CertificateInvalidError
	if !errors.As(err, &inv) || inv.Reason != x509.Expired {
		t.Fatalf("the first certificate after it expired: %v, want refused as expired", err)
	}
	expiredCP, err := ca.ClientConfig(oldCP, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	old, err := grpc.NewClient(addr, append(channel.DialOptions(), grpc.WithTransportCredentials(credentials.NewTLS(expiredCP)))...)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	ictx, icancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer icancel()
	if _, err := pb.NewAgentClient(old).Info(ictx, &pb.InfoRequest{}); err == nil {
		t.Fatal("the agent served a control plane certificate that had expired")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
