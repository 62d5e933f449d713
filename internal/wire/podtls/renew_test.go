package podtls_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/wire/podtls"
)

// expired issues, with a CA whose lifetime is a nanosecond, a pair that has already
// expired.
func expired(t *testing.T, ca *podtls.CA, issue func(*podtls.CA) (podtls.Pair, error)) podtls.Pair {
	t.Helper()
	short := *ca
	short.Lifetime = time.Nanosecond
	p := must(issue(&short))
	time.Sleep(time.Millisecond)
	if na := must(podtls.NotAfter(p)); time.Now().Before(na) {
		t.Fatalf("not expired: %s", na)
	}
	return p
}

// An expired certificate is refused on both sides of the channel: the agent's by the
// control plane, the control plane's by the agent.
func TestExpiredCertificateRefused(t *testing.T) {
	ca := must(podtls.NewCA())
	id := "sb-aaaaaaaaaa"
	old := expired(t, ca, func(c *podtls.CA) (podtls.Pair, error) { return c.IssueSandbox(id) })
	addr := serve(t, must(podtls.ServerConfig(old, ca.CertPEM())))
	_, err := talk(addr, must(ca.ClientConfig(must(ca.IssueControlPlane()), id)))
	var inv x509.CertificateInvalidError
	if !errors.As(err, &inv) || inv.Reason != x509.Expired {
		t.Fatalf("the control plane dialing an agent with an expired certificate: %v, want expired", err)
	}

	addr = serve(t, must(podtls.ServerConfig(must(ca.IssueSandbox(id)), ca.CertPEM())))
	cpOld := expired(t, ca, func(c *podtls.CA) (podtls.Pair, error) { return c.IssueControlPlane() })
	if got, err := talk(addr, must(ca.ClientConfig(cpOld, id))); err == nil && got == "ok" {
		t.Fatal("the agent served a control plane whose certificate has expired")
	}
	if got, err := talk(addr, must(ca.ClientConfig(must(ca.IssueControlPlane()), id))); err != nil || got != "ok" {
		t.Fatalf("a current control plane certificate: %q %v", got, err)
	}
}

// The agent presents the pair load returns at each handshake: a renewed one from the next
// connection on; one that does not parse, is for another sandbox, or ends sooner leaves
// the one in use.
func TestServerConfigReloading(t *testing.T) {
	ca := must(podtls.NewCA())
	id := "sb-aaaaaaaaaa"
	first := must(ca.IssueSandbox(id))
	var mu sync.Mutex
	current := first
	set := func(p podtls.Pair) { mu.Lock(); current = p; mu.Unlock() }
	var reloads []time.Time
	cfg := must(podtls.ServerConfigReloading(func() (podtls.Pair, error) {
		mu.Lock()
		defer mu.Unlock()
		return current, nil
	}, ca.CertPEM(), func(na time.Time) { reloads = append(reloads, na) }))
	addr := serve(t, cfg)
	presented := func() time.Time {
		t.Helper()
		c, err := tls.Dial("tcp", addr, must(ca.ClientConfig(must(ca.IssueControlPlane()), id)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].NotAfter
	}
	firstEnd := must(podtls.NotAfter(first))
	if got := presented(); !got.Equal(firstEnd) {
		t.Fatalf("presented %s, want the first certificate's %s", got, firstEnd)
	}
	time.Sleep(1100 * time.Millisecond) // certificates carry whole seconds
	renewed := must(ca.IssueSandbox(id))
	set(renewed)
	if got, want := presented(), must(podtls.NotAfter(renewed)); !got.Equal(want) || !want.After(firstEnd) {
		t.Fatalf("after renewal presented %s, want %s", got, want)
	}
	if len(reloads) != 1 {
		t.Errorf("reloaded %d times, want 1", len(reloads))
	}
	longer := *ca
	longer.Lifetime = 2 * podtls.DefaultLifetime
	for name, p := range map[string]podtls.Pair{
		"torn":           {Cert: renewed.Cert, Key: first.Key},
		"another's":      must(longer.IssueSandbox("sb-bbbbbbbbbb")),
		"shorter-lived":  expired(t, ca, func(c *podtls.CA) (podtls.Pair, error) { return c.IssueSandbox(id) }),
		"not PEM at all": {Cert: []byte("x"), Key: []byte("y")},
	} {
		set(p)
		if got := presented(); !got.Equal(must(podtls.NotAfter(renewed))) {
			t.Errorf("%s pair: presented %s, want the renewed one kept", name, got)
		}
	}
}

// The control plane's client certificate is renewed at half its life.
func TestRenewerRenews(t *testing.T) {
	ca := must(podtls.NewCA())
	ca.Lifetime = time.Hour
	r := must(ca.NewRenewer())
	a, b := must(r.Certificate()), must(r.Certificate())
	if a != b {
		t.Fatal("a certificate not half through its life was renewed")
	}
	if got := time.Until(a.Leaf.NotAfter); got < 59*time.Minute || got > time.Hour {
		t.Errorf("lasts %s, want the CA's lifetime", got)
	}
	ca.Lifetime = 2 * time.Second
	r = must(ca.NewRenewer())
	a = must(r.Certificate())
	time.Sleep(time.Until(a.Leaf.NotAfter.Add(-time.Second)) + 10*time.Millisecond)
	if c := must(r.Certificate()); c.Leaf.SerialNumber.Cmp(a.Leaf.SerialNumber) == 0 {
		t.Fatal("a certificate past half its life was not renewed")
	}
}

func TestRenewAt(t *testing.T) {
	end := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if got := podtls.RenewAt(end, 24*time.Hour); !got.Equal(end.Add(-12 * time.Hour)) {
		t.Errorf("RenewAt = %s", got)
	}
}
