package podtls_test

import (
	"crypto/tls"
	"testing"

	"github.com/paddockhq/paddock/internal/wire/podtls"
)

// TestWarmHandshake: a warm agent serves only the control plane; the control plane's
// claim goes only to the certificate that answered first (the pin), not to another warm
// agent's.
func TestWarmHandshake(t *testing.T) {
	ca := must(podtls.NewCA())
	cp := must(ca.IssueControlPlane())
	addrA := serve(t, must(podtls.WarmServerConfig(ca.CertPEM())))
	addrB := serve(t, must(podtls.WarmServerConfig(ca.CertPEM())))

	var seen []byte
	if got, err := talk(addrA, must(ca.WarmClientConfig(certOf(t, cp), nil, &seen))); err != nil || got != "ok" {
		t.Fatalf("the control plane reaching a warm agent: %q, %v", got, err)
	}
	if len(seen) == 0 {
		t.Fatal("the warm agent's certificate was not recorded")
	}
	if got, err := talk(addrA, must(ca.WarmClientConfig(certOf(t, cp), seen, nil))); err != nil || got != "ok" {
		t.Fatalf("pinned to A, reaching A: %q, %v", got, err)
	}
	if got, err := talk(addrB, must(ca.WarmClientConfig(certOf(t, cp), seen, nil))); err == nil && got == "ok" {
		t.Fatal("pinned to A, B was accepted")
	}
	// Anyone but the control plane is refused by a warm agent.
	someone := clientPair(t, ca)
	notCP := must(ca.WarmClientConfig(certOf(t, someone), nil, nil))
	if got, err := talk(addrA, notCP); err == nil && got == "ok" {
		t.Fatal("a warm agent served a client that is not the control plane")
	}
	other := must(podtls.NewCA())
	if got, err := talk(addrA, must(other.WarmClientConfig(certOf(t, must(other.IssueControlPlane())), nil, nil))); err == nil && got == "ok" {
		t.Fatal("a warm agent served another CA's control plane")
	}
}

// certOf is a certificate getter for p.
func certOf(t *testing.T, p podtls.Pair) func() (*tls.Certificate, error) {
	t.Helper()
	c, err := tls.X509KeyPair(p.Cert, p.Key)
	if err != nil {
		t.Fatal(err)
	}
	return func() (*tls.Certificate, error) { return &c, nil }
}
