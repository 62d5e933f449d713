package server_test

import (
	"context"
	"encoding/json"
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

// loopbackResolver resolves names to 127.0.0.1: the test's upstream, which the proxy may
// reach only because the test exempts that one address. A name starting "rebind." resolves
// to another loopback address and one starting "meta." to the cloud metadata address, as
// a hostile DNS answer for an allowed name would.
type loopbackResolver struct{}

func (loopbackResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	switch {
	case strings.HasPrefix(host, "rebind."):
		return []netip.Addr{netip.MustParseAddr("127.0.0.2")}, nil
	case strings.HasPrefix(host, "meta."):
		return []netip.Addr{netip.MustParseAddr("169.254.169.254")}, nil
	}
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

// startEgress starts a server whose network_policy allows *.allowed.test but
// bad.allowed.test, with a loopback upstream on the returned port standing for every host.
func startEgress(t *testing.T, edit ...func(*server.Config)) (*servertest.Env, uint16) {
	t.Helper()
	testenv.RequireRoot(t)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream saw %s %s", r.Host, r.URL.Path)
	}))
	t.Cleanup(upstream.Close)
	_, portText, _ := net.SplitHostPort(upstream.Listener.Addr().String())
	var port uint16
	fmt.Sscan(portText, &port)

	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte("network:\n  default: deny\n  allow: [\"*.allowed.test\"]\n  deny: [\"bad.allowed.test\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := server.Config{Runner: testenv.Config(t), Listen: "127.0.0.1:0", NetworkPolicy: pol}
	for _, e := range edit {
		e(&cfg)
	}
	e := servertest.StartOpts(t, cfg, server.Options{
		AuthOptions: servertest.CheapAuth(),
		Egress: egress.Options{Resolver: loopbackResolver{}, HTTPPorts: []uint16{port}, ConnectPorts: []uint16{port},
			UnsafeAllowAddrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, DialTimeout: 5 * time.Second},
	})
	return e, port
}

// A sandbox's own policy narrows what the server's network_policy allows it, from the
// next connection on, and never widens it: a host the operator denies stays denied
// whatever the sandbox's policy lists.
func TestEgressSandboxPolicyNarrows(t *testing.T) {
	e, port := startEgress(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "net"}), http.StatusCreated, &sb)
	get := func(host string) string {
		t.Helper()
		res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", fmt.Sprintf("curl -sS -m 10 -w ' %%{http_code}' http://%s:%d/", host, port)}})
		return string(res.Stdout)
	}
	if out := get("two.allowed.test"); !strings.HasSuffix(out, " 200") {
		t.Fatalf("before the sandbox's policy: %q, want 200", out)
	}
	attach := func(text string) {
		t.Helper()
		servertest.Decode(t, putPolicy(t, alice, sb.ID, "application/yaml", text), http.StatusOK, nil)
	}
	attach("network:\n  default: deny\n  allow: [one.allowed.test, bad.allowed.test, elsewhere.test]\n")
	if out := get("one.allowed.test"); !strings.HasSuffix(out, " 200") {
		t.Errorf("a host both allow: %q, want 200", out)
	}
	if out := get("two.allowed.test"); !strings.HasSuffix(out, " 403") || !strings.Contains(out, "sandbox policy network.default") {
		t.Errorf("a host the sandbox's policy leaves out: %q, want 403 naming the sandbox's rule", out)
	}
	for _, host := range []string{"bad.allowed.test", "elsewhere.test"} {
		if out := get(host); !strings.HasSuffix(out, " 403") || strings.Contains(out, "sandbox policy") {
			t.Errorf("%s, which the server's policy denies: %q, want 403 by the server's rule", host, out)
		}
	}
	servertest.Decode(t, alice.DoToken("DELETE", "/api/v1/sandboxes/"+sb.ID+"/policy", nil), http.StatusNoContent, nil)
	if out := get("two.allowed.test"); !strings.HasSuffix(out, " 200") {
		t.Errorf("after the policy was detached: %q, want 200", out)
	}
}

// A sandbox under a network policy reaches an allowed host through the egress proxy, is
// refused a denied one with the rule and the reason, and has no route at all for a
// program that ignores the proxy; every decision is an event of the user's.
func TestEgressFromSandbox(t *testing.T) {
	e, port := startEgress(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "net"}), http.StatusCreated, &sb)
	curl := func(args string) api.ExecResult {
		return execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "curl -sS -m 10 -w ' %{http_code}' " + args}})
	}

	res := curl(fmt.Sprintf("http://api.allowed.test:%d/hello", port))
	if want := fmt.Sprintf("upstream saw api.allowed.test:%d /hello 200", port); string(res.Stdout) != want {
		t.Fatalf("allowed host: %q %q, want %q", res.Stdout, res.Stderr, want)
	}
	res = curl(fmt.Sprintf("http://bad.allowed.test:%d/", port))
	if !strings.HasSuffix(string(res.Stdout), " 403") || !strings.Contains(string(res.Stdout), "network.deny") {
		t.Fatalf("denied host: %q %q, want 403 naming the deny rule", res.Stdout, res.Stderr)
	}
	res = curl(fmt.Sprintf("http://elsewhere.test:%d/", port))
	if !strings.HasSuffix(string(res.Stdout), " 403") {
		t.Fatalf("unlisted host: %q %q, want 403", res.Stdout, res.Stderr)
	}
	// Ignoring the proxy: the sandbox's own loopback has no upstream, and there is no
	// other route.
	for _, target := range []string{fmt.Sprintf("http://127.0.0.1:%d/", port), "http://1.1.1.1/"} {
		res = curl("--noproxy '*' " + target)
		if res.ExitCode == 0 || strings.Contains(string(res.Stdout), "upstream saw") {
			t.Fatalf("direct %s: exit %d %q: reached without the proxy", target, res.ExitCode, res.Stdout)
		}
	}

	// The other ways out, each of which must fail from inside: a raw TCP connection and an
	// IPv6 one (no route), DNS (no resolver to reach), an allowed name whose DNS answer is
	// a loopback or metadata address (the proxy checks what it dials), a CONNECT whose TLS
	// server name is another host, and a NUL byte in the requested host.
	for _, tc := range []struct{ name, script, want string }{
		{"raw tcp", "exec 3<>/dev/tcp/1.1.1.1/80 && echo CONNECTED", ""},
		{"ipv6", "curl -sS -m 5 --noproxy '*' -g 'http://[2606:4700::1111]/' && echo CONNECTED", ""},
		{"dns", "getent hosts example.com && echo CONNECTED", ""},
		{"rebinding", fmt.Sprintf("curl -sS -m 10 -w ' %%{http_code}' http://rebind.allowed.test:%d/", port), "egress.address"},
		{"metadata", fmt.Sprintf("curl -sS -m 10 -w ' %%{http_code}' http://meta.allowed.test:%d/", port), "egress.address"},
		{"sni mismatch", fmt.Sprintf("openssl s_client -quiet -proxy 127.0.0.1:3128 -connect api.allowed.test:%d -servername elsewhere.test </dev/null 2>&1; true", port), ""},
		{"nul host", `exec 3<>/dev/tcp/127.0.0.1/3128; printf 'CONNECT a\000b.allowed.test:443 HTTP/1.1
Host: a

' >&3; head -c 12 <&3`, "HTTP/1.1 400"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"bash", "-c", tc.script}})
			out := string(res.Stdout) + string(res.Stderr)
			if strings.Contains(out, "CONNECTED") || strings.Contains(out, "upstream saw") || !strings.Contains(out, tc.want) {
				t.Fatalf("got out: %q (exit %d), want a refusal containing %q", out, res.ExitCode, tc.want)
			}
		})
	}

	var evs api.EventList
	wantDeny := 2 + 4 // the denied and unlisted hosts; rebinding, metadata, SNI, NUL
	for range 50 {    // the events are written off the connection's path
		servertest.Decode(t, alice.DoToken("GET", "/api/v1/events?limit=1000", nil), http.StatusOK, &evs)
		if countActions(evs, "egress.allow") >= 1 && countActions(evs, "egress.deny") >= wantDeny {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if countActions(evs, "egress.allow") != 1 || countActions(evs, "egress.deny") != wantDeny {
		t.Fatalf("egress events: %d allowed, %d denied; want 1 and %d", countActions(evs, "egress.allow"), countActions(evs, "egress.deny"), wantDeny)
	}
	sni := false
	for _, e := range evs.Events {
		sni = sni || e.Action == "egress.deny" && e.Detail["rule"] == "egress.sni"
	}
	if !sni {
		t.Errorf("no egress.sni refusal among the events")
	}
}

func countActions(evs api.EventList, action string) int {
	n := 0
	for _, e := range evs.Events {
		if e.Action == action {
			n++
		}
	}
	return n
}

// With network.require_capability in the server's network_policy, a sandbox reaches an
// allowed host only with a net: capability its owner minted for it, given to the proxy as
// its user name; without one it is asked for one (407), a token for another host or a
// revoked one is refused (403, naming the token's ID, never the token), and the allowing
// event names the token's ID.
func TestEgressCapability(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte("network:\n  default: deny\n  allow: [\"*.allowed.test\"]\n  require_capability: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e, port := startEgress(t, func(c *server.Config) { c.NetworkPolicy = pol })
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "net"}), http.StatusCreated, &sb)
	var tok api.Capability
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/capabilities",
		api.CapabilityRequest{Resource: "net:api.allowed.test", Actions: []string{"connect"}, TTLSeconds: 600}), http.StatusCreated, &tok)
	if !strings.HasPrefix(tok.Token, "pdk1.") {
		t.Fatalf("minted %+v, want a token", tok)
	}
	curl := func(proxy, host string) string {
		t.Helper()
		res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c",
			fmt.Sprintf("curl -sS -m 10 -x %s -w ' %%{http_code}' http://%s:%d/", proxy, host, port)}})
		return string(res.Stdout)
	}
	withToken := "http://" + tok.Token + "@127.0.0.1:3128"
	if out := curl(withToken, "api.allowed.test"); !strings.HasSuffix(out, " 200") {
		t.Fatalf("with a token for the host: %q, want 200", out)
	}
	if out := curl("http://127.0.0.1:3128", "api.allowed.test"); !strings.HasSuffix(out, " 407") || !strings.Contains(out, "requires a net: capability token") {
		t.Errorf("without a token: %q, want 407 asking for one", out)
	}
	if out := curl(withToken, "web.allowed.test"); !strings.HasSuffix(out, " 403") || !strings.Contains(out, tok.ID) || strings.Contains(out, tok.Token) {
		t.Errorf("a token for another host: %q, want 403 naming capability %s", out, tok.ID)
	}
	servertest.Decode(t, alice.DoToken("DELETE", "/api/v1/sandboxes/"+sb.ID+"/capabilities/"+tok.ID, nil), http.StatusOK, nil)
	if out := curl(withToken, "api.allowed.test"); !strings.HasSuffix(out, " 403") || !strings.Contains(out, "revoked") {
		t.Errorf("a revoked token: %q, want 403 revoked", out)
	}

	var evs api.EventList
	named := false
	for range 50 { // the events are written off the connection's path
		servertest.Decode(t, alice.DoToken("GET", "/api/v1/events?limit=1000", nil), http.StatusOK, &evs)
		for _, ev := range evs.Events {
			named = named || ev.Action == "egress.allow" && ev.Detail["capability"] == tok.ID
		}
		if named {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !named {
		t.Errorf("no egress.allow event names capability %s", tok.ID)
	}
	raw, _ := json.Marshal(evs)
	if strings.Contains(string(raw), tok.Token) {
		t.Errorf("an event holds the token itself")
	}
}
