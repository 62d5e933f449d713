package server_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/egress"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/testenv"
)

// network_policy: registries lets sandboxes reach the public registries through the
// allowlist, and nothing else: a refusal names the host and the rule in the status line
// and a short body, which is what tools print. The registry here is a server on loopback
// that the proxy's resolver gives registry.npmjs.org's name.
func TestNetworkPolicyRegistries(t *testing.T) {
	testenv.RequireRoot(t)
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "registry %s %s", r.Host, r.URL.Path)
	}))
	t.Cleanup(reg.Close)
	_, portText, _ := net.SplitHostPort(reg.Listener.Addr().String())
	var port uint16
	fmt.Sscan(portText, &port)
	e := servertest.StartOpts(t, server.Config{Runner: testenv.Config(t), Listen: "127.0.0.1:0", NetworkPolicy: "registries"}, server.Options{
		AuthOptions: servertest.CheapAuth(),
		Egress: egress.Options{Resolver: loopbackResolver{}, HTTPPorts: []uint16{port},
			UnsafeAllowAddrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, DialTimeout: 5 * time.Second},
	})
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "p"}), http.StatusCreated, &sb)
	for _, host := range []string{"registry.npmjs.org", "proxy.golang.org", "sum.golang.org", "index.crates.io", "static.crates.io"} {
		got := execOK(t, alice, sb.ID, "curl", "-s", fmt.Sprintf("http://%s:%d/pkg", host, port))
		if want := fmt.Sprintf("registry %s:%d /pkg", host, port); got != want {
			t.Errorf("%s through the registries policy: %q, want %q", host, got, want)
		}
	}
	got := execOK(t, alice, sb.ID, "curl", "-s", "-i", fmt.Sprintf("http://elsewhere.example:%d/pkg", port))
	status, body, _ := strings.Cut(got, "\r\n")
	if !strings.HasPrefix(status, "HTTP/1.1 403 ") || !strings.Contains(status, "elsewhere.example") || !strings.Contains(status, "network.default") ||
		!strings.Contains(body, "elsewhere.example is not on the allow list") {
		t.Errorf("a host the registries policy does not allow:\n%s\nwant the host and the rule in the status line and the body", got)
	}
}

// With egress_upstream_proxy the egress proxy decides each request, then goes through the
// operator's forward proxy (tinyproxy here, asking for credentials): the registry sees the
// request arrive through it. A malformed one stops the start naming the key, without its
// password.
func TestEgressUpstreamProxy(t *testing.T) {
	testenv.RequireRoot(t)
	cfg := testenv.Config(t)
	bad := server.Config{Runner: cfg, Listen: "127.0.0.1:0", EgressUpstreamProxy: "socks5://u:hunter2@127.0.0.1:1080"}
	if _, err := server.New(t.Context(), bad, testenv.Logger(t), server.Options{}); err == nil || !strings.Contains(err.Error(), "egress_upstream_proxy") || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("a socks5 upstream proxy: %v, want it refused naming the key and not the password", err)
	}

	up, logf := testenv.StartTinyproxy(t, "paddock", "s3cret")
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "registry via %s", r.Header.Get("Via"))
	}))
	t.Cleanup(reg.Close)
	_, portText, _ := net.SplitHostPort(reg.Listener.Addr().String())
	var port uint16
	fmt.Sscan(portText, &port)
	pol := filepath.Join(t.TempDir(), "network.yaml")
	if err := os.WriteFile(pol, []byte("network:\n  default: deny\n  allow: [\"127.0.0.1\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// No UnsafeAllowAddrs: the upstream proxy, not paddock, connects to the registry. curl
	// is told to use the egress proxy for 127.0.0.1 too (NO_PROXY keeps loopback direct).
	e := servertest.StartOpts(t, server.Config{Runner: testenv.Config(t), Listen: "127.0.0.1:0", NetworkPolicy: pol, EgressUpstreamProxy: up}, server.Options{
		AuthOptions: servertest.CheapAuth(), Egress: egress.Options{HTTPPorts: []uint16{port}, DialTimeout: 5 * time.Second},
	})
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "p"}), http.StatusCreated, &sb)
	if got := execOK(t, alice, sb.ID, "curl", "-s", "--noproxy", "", fmt.Sprintf("http://127.0.0.1:%d/pkg", port)); !strings.Contains(got, "registry via") || !strings.Contains(got, "tinyproxy") {
		t.Errorf("through the upstream proxy the registry answered %q, want it reached via tinyproxy", got)
	}
	if log, _ := os.ReadFile(logf); !strings.Contains(string(log), fmt.Sprintf("127.0.0.1:%d", port)) {
		t.Errorf("tinyproxy's log does not show the request:\n%s", log)
	}
	got := execOK(t, alice, sb.ID, "curl", "-s", "-i", fmt.Sprintf("http://elsewhere.example:%d/", port))
	if !strings.HasPrefix(got, "HTTP/1.1 403 ") || !strings.Contains(got, "network.default") {
		t.Errorf("a host the policy does not allow, with an upstream proxy: %q", got)
	}
}
