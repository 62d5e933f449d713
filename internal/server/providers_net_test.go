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

// A host the network policy allows is reached by the sandbox's commands, but not while a
// provider step runs there: a step reaches its provider's registries alone, and what it
// ran prints why it was refused.
func TestProviderStepNetworkIsItsRegistries(t *testing.T) {
	testenv.RequireRoot(t)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "reached") }))
	t.Cleanup(other.Close)
	e, port := startBehindEgress(t, other, "other.test", "registry.npmjs.org")
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "p"}), http.StatusCreated, &sb)
	url := fmt.Sprintf("http://other.test:%d/", port)
	if got := execOK(t, alice, sb.ID, "curl", "-sS", url); got != "reached" {
		t.Fatalf("a command outside a step reached %s with %q, want it reached", url, got)
	}
	execOK(t, alice, sb.ID, "sh", "-c", `mkdir app && cd app && cat > package.json <<E
{"name": "app", "version": "1.0.0", "scripts": {"build": "curl -si `+url+` | head -1; curl -sf -o /dev/null `+url+`"}}
E
npm install --offline --no-audit --no-fund >/dev/null`)

	evs := providerStep(t, alice, sb.ID, "build", api.ProviderRequest{Dir: "app"})
	r, log := result(evs), logText(evs)
	if r.Error == "" || !strings.Contains(r.Error, "npm run build") {
		t.Errorf("a build reaching a host that is not its registry: result %+v, want npm run build failed; log:\n%s", r, log)
	}
	if !strings.Contains(log, "while the node provider's build step runs, the sandbox reaches only its registries (registry.npmjs.org)") {
		t.Errorf("the build's output does not say why other.test was refused; log:\n%s", log)
	}
	var evsList api.EventList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/events?action=egress.deny", nil), http.StatusOK, &evsList)
	if len(evsList.Events) == 0 || evsList.Events[0].Detail["rule"] != "provider step" {
		t.Errorf("egress.deny events %+v, want the step's refusal with its rule", evsList.Events)
	}
	// The step over, the policy alone decides again.
	if got := execOK(t, alice, sb.ID, "curl", "-sS", url); got != "reached" {
		t.Errorf("after the step a command reached %s with %q, want it reached", url, got)
	}
}

// startBehindEgress starts a server whose network policy allows the hosts allow alone, its
// egress proxy resolving every name to loopback and reaching srv's port there; it returns
// the server and that port.
func startBehindEgress(t *testing.T, srv *httptest.Server, allow ...string) (*servertest.Env, uint16) {
	t.Helper()
	_, portText, _ := net.SplitHostPort(srv.Listener.Addr().String())
	var port uint16
	fmt.Sscan(portText, &port)
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte("network:\n  default: deny\n  allow: ["+strings.Join(allow, ", ")+"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := servertest.StartOpts(t, server.Config{Runner: testenv.Config(t), Listen: "127.0.0.1:0", NetworkPolicy: pol}, server.Options{
		AuthOptions: servertest.CheapAuth(),
		Egress: egress.Options{Resolver: loopbackResolver{}, HTTPPorts: []uint16{port},
			UnsafeAllowAddrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, DialTimeout: 5 * time.Second},
	})
	return e, port
}
