package podtls_test

import (
	"crypto/tls"
	"io"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/wire/podtls"
)

// serve answers one TLS connection on a loopback listener with cfg, writing "ok" once the
// handshake holds; it returns the address.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if err := c.(*tls.Conn).Handshake(); err == nil {
					_, _ = c.Write([]byte("ok"))
				}
			}()
		}
	}()
	return l.Addr().String()
}

// talk dials addr with cfg and reads what the server says: "ok" when both sides accepted.
func talk(addr string, cfg *tls.Config) (string, error) {
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	b, err := io.ReadAll(c)
	return string(b), err
}

func TestChannelIdentity(t *testing.T) {
	ca := must(podtls.NewCA())
	other := must(podtls.NewCA())
	a := must(ca.IssueSandbox("sb-aaaaaaaaaa"))
	cp := must(ca.IssueControlPlane())
	foreignCP := must(other.IssueControlPlane())
	agentA := must(podtls.ServerConfig(a, ca.CertPEM()))
	addr := serve(t, agentA)

	t.Run("the control plane reaches sandbox A as A", func(t *testing.T) {
		got, err := talk(addr, must(ca.ClientConfig(cp, "sb-aaaaaaaaaa")))
		if err != nil || got != "ok" {
			t.Fatalf("got %q, %v; want ok", got, err)
		}
	})
	t.Run("A's pod cannot answer as B", func(t *testing.T) {
		_, err := talk(addr, must(ca.ClientConfig(cp, "sb-bbbbbbbbbb")))
		if err == nil || !strings.Contains(err.Error(), "sb-bbbbbbbbbb") {
			t.Fatalf("dialling B reached A's agent: %v", err)
		}
	})
	t.Run("another CA's server is refused", func(t *testing.T) {
		fake := must(other.IssueSandbox("sb-aaaaaaaaaa"))
		addr := serve(t, must(podtls.ServerConfig(fake, ca.CertPEM())))
		if _, err := talk(addr, must(ca.ClientConfig(cp, "sb-aaaaaaaaaa"))); err == nil {
			t.Fatal("a server certificate of another CA was accepted")
		}
	})
	refused := []struct {
		name string
		cfg  *tls.Config
	}{
		{"no client certificate", &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}},
		{"another CA's control plane", clientAs(t, ca, foreignCP)},
		// A sandbox's own pair has no client use: one agent cannot call another.
		{"sandbox B's certificate as a client", clientAs(t, ca, must(ca.IssueSandbox("sb-bbbbbbbbbb")))},
		{"a client certificate of the CA's not naming the control plane", clientAs(t, ca, clientPair(t, ca))},
	}
	for _, tt := range refused {
		t.Run("the agent refuses "+tt.name, func(t *testing.T) {
			got, err := talk(addr, tt.cfg)
			if err == nil && got == "ok" {
				t.Fatal("the agent served it")
			}
		})
	}
}

// clientAs presents pair to the agent, trusting the agent as the control plane would.
func clientAs(t *testing.T, ca *podtls.CA, pair podtls.Pair) *tls.Config {
	t.Helper()
	cert, err := tls.X509KeyPair(pair.Cert, pair.Key)
	if err != nil {
		t.Fatal(err)
	}
	cfg := must(ca.ClientConfig(must(ca.IssueControlPlane()), "sb-aaaaaaaaaa"))
	cfg.Certificates = []tls.Certificate{cert}
	return cfg
}

// clientPair is a client certificate the CA issued to a name other than the control plane's.
func clientPair(t *testing.T, ca *podtls.CA) podtls.Pair {
	t.Helper()
	p, err := podtls.IssueClientForTest(ca, "someone-else")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseCARoundTrip(t *testing.T) {
	ca := must(podtls.NewCA())
	key := must(ca.KeyPEM())
	back, err := podtls.ParseCA(ca.CertPEM(), key)
	if err != nil {
		t.Fatal(err)
	}
	// A sandbox certificate the reloaded CA issues is trusted by the first's clients.
	addr := serve(t, must(podtls.ServerConfig(must(back.IssueSandbox("sb-cccccccccc")), ca.CertPEM())))
	if got, err := talk(addr, must(ca.ClientConfig(must(ca.IssueControlPlane()), "sb-cccccccccc"))); err != nil || got != "ok" {
		t.Fatalf("got %q, %v", got, err)
	}
	if _, err := podtls.ParseCA(must(ca.IssueSandbox("sb-cccccccccc")).Cert, key); err == nil {
		t.Fatal("a leaf certificate was taken for a CA")
	}
	if _, err := podtls.ParseCA([]byte("junk"), key); err == nil {
		t.Fatal("junk was taken for a CA certificate")
	}
}

func TestPairNeverPrintsItsKey(t *testing.T) {
	p := must(must(podtls.NewCA()).IssueSandbox("sb-dddddddddd"))
	for _, s := range []string{p.String(), p.LogValue().String()} {
		if strings.Contains(s, "PRIVATE") {
			t.Fatalf("a pair printed its key: %s", s)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
