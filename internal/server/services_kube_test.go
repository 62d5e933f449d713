//go:build kube

package server_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/egress"
	"github.com/paddockhq/paddock/internal/gateway"
	"github.com/paddockhq/paddock/internal/gateway/scripted"
	"github.com/paddockhq/paddock/internal/sandbox/kube/kubetest"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/testenv"
	testkube "github.com/paddockhq/paddock/internal/testenv/kube"
)

// keyedProvider is the scripted provider behind a check of the platform's key, as a real
// provider's: it records every credential it was shown.
type keyedProvider struct {
	*scripted.Provider
	key  string
	mu   sync.Mutex
	seen []string
}

func (p *keyedProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	got := r.Header.Get("x-api-key")
	if a := r.Header.Get("Authorization"); a != "" {
		got = strings.TrimPrefix(a, "Bearer ")
	}
	p.mu.Lock()
	p.seen = append(p.seen, got)
	p.mu.Unlock()
	if got != p.key {
		http.Error(w, `{"error":{"message":"bad key"}}`, http.StatusUnauthorized)
		return
	}
	p.Provider.ServeHTTP(w, r)
}

func (p *keyedProvider) credentials() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

func newKeyedProvider(t *testing.T, key, content string) (*keyedProvider, string) {
	t.Helper()
	sc, err := scripted.Parse(fmt.Appendf(nil, `{"steps": [{"respond": {"content": %q, "fragment": 64, "repeat": true}}]}`, content))
	if err != nil {
		t.Fatal(err)
	}
	p := &keyedProvider{Provider: scripted.New(sc), key: key}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv.URL
}

// TestServicesOnCluster: a process in a sandbox on the cluster reaches the host's services
// through its agent's relay over the pod's channel, with the guarantees of one host: the
// broker gives it its own user's secret and nobody else's, the gateway adds the platform's
// key (OpenAI's and Anthropic's wire formats) and counts the tokens to the sandbox the
// request came from, and the egress proxy lets it reach an allowed host and refuses a
// denied one, naming it. Identity comes from the channel: one sandbox's relay cannot act
// for another's (its lease, its usage, its secret). All of it holds with pod_firewall too,
// which keeps the sandbox's packets on its loopback, where the agent relays them.
func TestServicesOnCluster(t *testing.T) {
	testenv.RequireRoot(t)
	t.Run("network", func(t *testing.T) { servicesOnCluster(t, false) })
	t.Run("pod_firewall", func(t *testing.T) { servicesOnCluster(t, true) })
}

func servicesOnCluster(t *testing.T, firewall bool) {
	const openaiKey, anthropicKey = "sk-PLATFORM-openai-9c2e1a", "sk-ant-PLATFORM-4b7d0f"
	openai, openaiURL := newKeyedProvider(t, openaiKey, "hello from openai")
	anthropic, anthropicURL := newKeyedProvider(t, anthropicKey, "hello from anthropic")
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream saw %s %s", r.Host, r.URL.Path)
	}))
	t.Cleanup(upstream.Close)
	_, portText, _ := net.SplitHostPort(upstream.Listener.Addr().String())
	var port uint16
	fmt.Sscan(portText, &port)

	dir := t.TempDir()
	netPolicy, brokerFile := filepath.Join(dir, "network.yaml"), filepath.Join(dir, "broker.yaml")
	if err := os.WriteFile(netPolicy, []byte("network:\n  default: deny\n  allow: [\"*.allowed.test\"]\n  deny: [\"bad.allowed.test\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(brokerFile, []byte(brokerPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := server.Config{Runner: kubetest.Config(t, testenv.Config(t)), Listen: "127.0.0.1:0",
		NetworkPolicy: netPolicy, BrokerPolicy: brokerFile,
		Gateway: gateway.Config{Providers: []gateway.Provider{
			{Name: "openai", Kind: gateway.KindOpenAI, BaseURL: openaiURL, APIKey: openaiKey},
			{Name: "claude", Kind: gateway.KindAnthropic, BaseURL: anthropicURL, APIKey: anthropicKey},
		}}}
	cfg.Runner.Cluster.PodFirewall = firewall
	e := servertest.StartOpts(t, cfg, server.Options{
		AuthOptions: servertest.CheapAuth(),
		Egress: egress.Options{Resolver: loopbackResolver{}, HTTPPorts: []uint16{port}, ConnectPorts: []uint16{port},
			UnsafeAllowAddrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, DialTimeout: 5 * time.Second},
	})
	alice, bob := e.Register(t, "alice"), e.Register(t, "bob")
	const aliceCanary, bobCanary = "ghp_CANARY_alice_k8s_51ad", "ghp_CANARY_bob_k8s_77e0"
	for _, s := range []struct {
		c *servertest.Client
		v string
	}{{alice, aliceCanary}, {bob, bobCanary}} {
		if _, err := e.Server.Secrets().Put(context.Background(), s.c.User.ID, "github_token", []byte(s.v)); err != nil {
			t.Fatal(err)
		}
	}
	var sa, sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work"}), http.StatusCreated, &sa)
	servertest.Decode(t, bob.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work"}), http.StatusCreated, &sb)
	if sa.Node != testkube.NodeName || sb.Node != testkube.NodeName {
		t.Fatalf("not on the cluster: %+v %+v", sa, sb)
	}
	t.Cleanup(func() {
		for _, s := range []struct {
			c  *servertest.Client
			id string
		}{{alice, sa.ID}, {bob, sb.ID}} {
			resp := s.c.DoToken("DELETE", "/api/v1/sandboxes/"+s.id, nil)
			resp.Body.Close()
		}
	})

	// The broker: each sandbox gets its own user's secret; a lease is its sandbox's alone.
	res := secretCmd(t, alice, sa.ID, "get", "github")
	if res.ExitCode != 0 || string(res.Stdout) != aliceCanary {
		t.Fatalf("alice's secret get github: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	res = secretCmd(t, bob, sb.ID, "get", "github", "--json")
	if res.ExitCode != 0 || !strings.Contains(string(res.Stdout), bobCanary) || strings.Contains(string(res.Stdout), aliceCanary) {
		t.Fatalf("bob's secret get github: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	lease := string(res.Stdout)[strings.Index(string(res.Stdout), `"ls-`)+1:]
	lease = lease[:strings.IndexByte(lease, '"')]
	if res := secretCmd(t, alice, sa.ID, "renew", lease); res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "no such lease") {
		t.Fatalf("alice's sandbox renewing bob's lease %s: exit %d %q %q, want no such lease", lease, res.ExitCode, res.Stdout, res.Stderr)
	}
	if res := secretCmd(t, bob, sb.ID, "renew", lease); res.ExitCode != 0 {
		t.Fatalf("bob's sandbox renewing its lease: exit %d %q", res.ExitCode, res.Stderr)
	}
	if res := secretCmd(t, alice, sa.ID, "get", "bobonly"); res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "does not grant this capability to this user") {
		t.Fatalf("alice's sandbox asking for bob's capability: exit %d %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}

	// The gateway, in both wire formats, with a key of the sandbox's own that never
	// reaches the provider.
	res = execIn(t, alice, sa.ID, api.ExecRequest{Argv: []string{"sh", "-c",
		`curl -sS -N -H "Authorization: Bearer sandbox-own" -H 'content-type: application/json' ` +
			`-d '{"model":"gpt-x","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}' "$OPENAI_BASE_URL/chat/completions"; echo; env`}})
	if out := string(res.Stdout); res.ExitCode != 0 || !strings.Contains(out, `"content":"hello from openai"`) || !strings.Contains(out, "data: [DONE]") {
		t.Fatalf("OpenAI through the gateway: exit %d\n%s\n%s", res.ExitCode, res.Stdout, res.Stderr)
	} else if strings.Contains(out, openaiKey) || strings.Contains(out, anthropicKey) {
		t.Fatalf("a platform key reached the sandbox:\n%s", out)
	}
	res = execIn(t, bob, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c",
		`curl -sS -N -H "x-api-key: $ANTHROPIC_API_KEY" -H 'anthropic-version: 2023-06-01' -H 'content-type: application/json' ` +
			`-d '{"model":"claude-x","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}' "$ANTHROPIC_BASE_URL/v1/messages"`}})
	if out := string(res.Stdout); res.ExitCode != 0 || !strings.Contains(out, "event: message_stop") || !strings.Contains(out, "hello from anthropic") {
		t.Fatalf("Anthropic through the gateway: exit %d\n%s\n%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	for _, p := range []*keyedProvider{openai, anthropic} {
		if seen := p.credentials(); len(seen) != 1 || seen[0] != p.key {
			t.Errorf("the provider was shown %q, want only the platform's key", seen)
		}
	}
	// The tokens are counted to the sandbox each request came from.
	usage := func(c *servertest.Client) map[string]any {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			var evs api.EventList
			servertest.Decode(t, c.DoToken("GET", "/api/v1/events?action=gateway.usage", nil), http.StatusOK, &evs)
			if len(evs.Events) > 0 {
				return evs.Events[0].Detail
			}
		}
		return nil
	}
	if u := usage(alice); u == nil || u["sandbox_id"] != sa.ID || u["provider"] != "openai" {
		t.Errorf("alice's usage event: %v, want openai from %s", u, sa.ID)
	}
	if u := usage(bob); u == nil || u["sandbox_id"] != sb.ID || u["provider"] != "claude" {
		t.Errorf("bob's usage event: %v, want claude from %s", u, sb.ID)
	}

	// The egress proxy: an allowed host through it; a denied one refused, named.
	curl := func(url string) string {
		res := execIn(t, alice, sa.ID, api.ExecRequest{Argv: []string{"sh", "-c", "curl -sS -m 20 -w ' %{http_code}' " + url}})
		return string(res.Stdout) + string(res.Stderr)
	}
	if out, want := curl(fmt.Sprintf("http://api.allowed.test:%d/hello", port)), fmt.Sprintf("upstream saw api.allowed.test:%d /hello 200", port); out != want {
		t.Fatalf("allowed host: %q, want %q", out, want)
	}
	if out := curl(fmt.Sprintf("http://bad.allowed.test:%d/", port)); !strings.HasSuffix(out, " 403") || !strings.Contains(out, "bad.allowed.test") || !strings.Contains(out, "network.deny") {
		t.Fatalf("denied host: %q, want 403 naming the host and the deny rule", out)
	}
	if out := curl(fmt.Sprintf("https://elsewhere.test:%d/", port)); strings.Contains(out, "upstream saw") || !strings.Contains(out, "403") {
		t.Fatalf("CONNECT to an unlisted host: %q, want refused 403", out)
	}
	var evs api.EventList
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		servertest.Decode(t, alice.DoToken("GET", "/api/v1/events?limit=1000", nil), http.StatusOK, &evs)
		if countActions(evs, "egress.allow") >= 1 && countActions(evs, "egress.deny") >= 2 {
			break
		}
	}
	for _, ev := range evs.Events {
		if strings.HasPrefix(ev.Action, "egress.") && ev.Detail["sandbox_id"] != sa.ID {
			t.Errorf("egress event of another sandbox in alice's: %+v", ev)
		}
	}
	if countActions(evs, "egress.allow") != 1 || countActions(evs, "egress.deny") != 2 {
		t.Errorf("egress events: %d allowed, %d denied; want 1 and 2", countActions(evs, "egress.allow"), countActions(evs, "egress.deny"))
	}
}
