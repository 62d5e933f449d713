package server_test

import (
	"context"
	"encoding/json"
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

const brokerPolicy = `
capabilities:
  github:
    secrets: [github_token, gh_token]
    ttl: 10m
  devonly:
    secrets: [github_token]
    roles: [dev]
  bobonly:
    secrets: [github_token]
    users: [bob]
`

// secretCmd runs `paddock-agent secret ARGS` in a sandbox, as any process there would.
func secretCmd(t *testing.T, c *servertest.Client, id string, args ...string) api.ExecResult {
	t.Helper()
	return execIn(t, c, id, api.ExecRequest{Argv: append([]string{wire.AgentPath, "secret"}, args...)})
}

// A process in a sandbox asks the broker for a capability over the sandbox's own channel
// and gets its user's secret; everything else is denied with a reason, and every decision
// is audited without the value.
func TestBrokerFromSandbox(t *testing.T) {
	policy := filepath.Join(t.TempDir(), "broker.yaml")
	if err := os.WriteFile(policy, []byte(brokerPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	e := servertest.Start(t, func(c *server.Config) { c.BrokerPolicy = policy })
	alice, bob := e.Register(t, "alice"), e.Register(t, "bob")
	const canary = "ghp_CANARY_alice_7f3e9a"
	if _, err := e.Server.Secrets().Put(context.Background(), alice.User.ID, "github_token", []byte(canary)); err != nil {
		t.Fatal(err)
	}
	var sb, bobSB api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work"}), http.StatusCreated, &sb)
	servertest.Decode(t, bob.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work"}), http.StatusCreated, &bobSB)

	res := secretCmd(t, alice, sb.ID, "get", "github")
	if res.ExitCode != 0 || string(res.Stdout) != canary {
		t.Fatalf("secret get github: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	res = secretCmd(t, alice, sb.ID, "get", "github", "--json")
	var g struct {
		LeaseID    string `json:"lease_id"`
		Secret     string `json:"secret"`
		Value      string `json:"value"`
		TTLSeconds int64  `json:"ttl_seconds"`
	}
	if err := json.Unmarshal(res.Stdout, &g); err != nil || g.Secret != "github_token" || g.Value != canary || g.TTLSeconds < 590 || g.TTLSeconds > 600 {
		t.Fatalf("secret get --json: %s (%v) %s", res.Stdout, err, res.Stderr)
	}
	res = secretCmd(t, alice, sb.ID, "renew", g.LeaseID)
	if res.ExitCode != 0 || strings.Contains(string(res.Stdout), canary) {
		t.Fatalf("renew: exit %d %s %s", res.ExitCode, res.Stdout, res.Stderr)
	}
	// Under gVisor too: the agent's loopback there is the Sentry's network stack.
	var gv api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "gvisor", Runtime: "runsc"}), http.StatusCreated, &gv)
	if res := secretCmd(t, alice, gv.ID, "get", "github"); res.ExitCode != 0 || string(res.Stdout) != canary {
		t.Fatalf("secret get under runsc: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	servertest.Decode(t, alice.DoToken("DELETE", "/api/v1/sandboxes/"+gv.ID, nil), http.StatusNoContent, nil)

	for _, tc := range []struct {
		name   string
		c      *servertest.Client
		id     string
		args   []string
		reason string
	}{
		{"unknown capability", alice, sb.ID, []string{"get", "aws"}, "no such capability"},
		{"role", alice, sb.ID, []string{"get", "devonly"}, "only to [dev] sandboxes"},
		{"user", alice, sb.ID, []string{"get", "bobonly"}, "does not grant this capability to this user"},
		{"bad name", alice, sb.ID, []string{"get", "../x"}, "capability"},
		{"another user's secret", bob, bobSB.ID, []string{"get", "github"}, "has set none of its secrets"},
		{"forged lease", alice, sb.ID, []string{"renew", "ls-0123456789abcdef0123456789abcdef"}, "no such lease"},
		{"malformed lease", alice, sb.ID, []string{"renew", "ls-x"}, "want ls- and 32 hex digits"},
		{"another sandbox's lease", bob, bobSB.ID, []string{"renew", g.LeaseID}, "no such lease"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := secretCmd(t, tc.c, tc.id, tc.args...)
			if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), tc.reason) || strings.Contains(string(res.Stdout)+string(res.Stderr), canary) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want a denial saying %q", res.ExitCode, res.Stdout, res.Stderr, tc.reason)
			}
		})
	}

	// Every decision is an audit event with the sandbox, capability and outcome, no value.
	var evs api.EventList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/events?limit=1000", nil), http.StatusOK, &evs)
	var allow, deny int
	for _, ev := range evs.Events {
		raw, _ := json.Marshal(ev)
		if strings.Contains(string(raw), canary) {
			t.Fatalf("event carries the value: %s", raw)
		}
		if !strings.HasPrefix(ev.Action, "broker.") {
			continue
		}
		if ev.Detail["sandbox_id"] == gv.ID {
			continue
		}
		if ev.Detail["sandbox_id"] != sb.ID {
			t.Errorf("event without the sandbox: %s", raw)
		}
		switch ev.Detail["decision"] {
		case "allow":
			allow++
		case "deny":
			deny++
			if ev.Detail["reason"] == "" {
				t.Errorf("denial without a reason: %s", raw)
			}
		}
	}
	if allow != 3 || deny != 6 {
		t.Errorf("alice's broker events: %d allowed, %d denied; want 3 and 6", allow, deny)
	}

	// Stopping the sandbox revokes its leases: after a start, the old lease is refused.
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/stop", nil), http.StatusOK, nil)
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/start", nil), http.StatusOK, nil)
	res = secretCmd(t, alice, sb.ID, "renew", g.LeaseID)
	if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "was revoked (the sandbox stopped)") {
		t.Fatalf("renew after stop: exit %d %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	// The restarted sandbox is served again.
	if res = secretCmd(t, alice, sb.ID, "get", "github"); string(res.Stdout) != canary {
		t.Fatalf("after restart: exit %d %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
}
