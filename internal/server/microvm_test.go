package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/wire"
)

// With tier microvm in the config, every sandbox is a VM, and the control plane's paths
// into one work as into a container (slow: two guests boot under TCG here): the proxy
// reaches the user's live app in its guest, and a process in the guest reaches the secrets
// broker on its own loopback, relayed by the agent over the VM's channel.
func TestMicroVMThroughTheControlPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("boots two microVM guests (seconds each under TCG); run without -short")
	}
	policy := filepath.Join(t.TempDir(), "broker.yaml")
	if err := os.WriteFile(policy, []byte(brokerPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	e := servertest.Start(t, func(c *server.Config) {
		c.BrokerPolicy = policy
		c.Runner.Tier = wire.TierMicroVM
	})
	alice := e.Register(t, "alice")
	const canary = "ghp_CANARY_vm_5d1c"
	if _, err := e.Server.Secrets().Put(context.Background(), alice.User.ID, "github_token", []byte(canary)); err != nil {
		t.Fatal(err)
	}
	var roles api.Roles
	alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &roles)
	if roles.Live.Tier != string(wire.TierMicroVM) || roles.Live.State != api.StateRunning {
		t.Fatalf("live sandbox: %+v, want a running microvm", roles.Live)
	}
	// The proxy: the welcome app in the live guest says which sandbox and kernel it is.
	resp := alice.App("GET", "/api/info", nil)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var info struct{ Sandbox, Kernel string }
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &info) != nil || info.Sandbox != roles.Live.ID || !strings.HasSuffix(info.Kernel, "-amd64") {
		var st api.AppStatus
		servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+roles.Live.ID+"/app", nil), http.StatusOK, &st)
		t.Fatalf("GET /api/info through the proxy: %d %s (the app: %+v)", resp.StatusCode, body, st)
	}
	// The broker, from a process in the guest.
	if res := secretCmd(t, alice, roles.Live.ID, "get", "github"); res.ExitCode != 0 || string(res.Stdout) != canary {
		t.Fatalf("secret get in a microVM: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	if res := secretCmd(t, alice, roles.Live.ID, "get", "aws"); res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "no such capability") {
		t.Fatalf("a denied capability in a microVM: exit %d, stderr %q", res.ExitCode, res.Stderr)
	}
}
