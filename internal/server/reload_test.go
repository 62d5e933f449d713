package server_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
)

// Reload (SIGHUP to paddock serve) puts new versions of the server's policy files — the
// default policy, network_policy and broker_policy — in force for running sandboxes at
// their next command, connection and broker request; a version that does not load is
// refused with its file, line and field, and the last good one stays in force.
func TestReloadPolicies(t *testing.T) {
	dir := t.TempDir()
	def, brk := filepath.Join(dir, "default.yaml"), filepath.Join(dir, "broker.yaml")
	writeFile(t, def, "shell: {deny: [\"touch /workspace/blocked\"]}\n")
	writeFile(t, brk, "capabilities:\n  github: {secrets: [github_token]}\n")
	e, port := startEgress(t, func(c *server.Config) { c.Policy, c.BrokerPolicy = def, brk })
	alice := e.Register(t, "alice")
	if _, err := e.Server.Secrets().Put(context.Background(), alice.User.ID, "github_token", []byte("ghp_reload")); err != nil {
		t.Fatal(err)
	}
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work"}), http.StatusCreated, &sb)
	get := func(host string) string {
		t.Helper()
		res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", fmt.Sprintf("curl -sS -m 10 -w ' %%{http_code}' http://%s:%d/", host, port)}})
		return string(res.Stdout)
	}
	secret := func() api.ExecResult { return secretCmd(t, alice, sb.ID, "get", "github") }
	if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"echo", "hi"}}); string(res.Stdout) != "hi\n" {
		t.Fatalf("echo before the reload: %+v", res)
	}
	if res := secret(); res.ExitCode != 0 || string(res.Stdout) != "ghp_reload" {
		t.Fatalf("secret get before the reload: %+v", res)
	}
	if out := get("two.allowed.test"); !strings.HasSuffix(out, " 200") {
		t.Fatalf("two.allowed.test before the reload: %q, want 200", out)
	}

	writeFile(t, def, "shell: {deny: [\"echo *\"]}\n")
	writeFile(t, brk, "capabilities:\n  other: {secrets: [github_token]}\n")
	writeFile(t, e.Config.NetworkPolicy, "network:\n  default: deny\n  allow: [\"one.allowed.test\"]\n")
	if err := e.Server.Reload(context.Background()); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	execDenied(t, alice, sb.ID, api.ExecRequest{Argv: []string{"echo", "hi"}}, "shell.deny[0]")
	if res := secret(); res.ExitCode == 0 || strings.Contains(string(res.Stdout), "ghp_reload") {
		t.Fatalf("secret get after the broker's policy dropped github: %+v", res)
	}
	if out := get("two.allowed.test"); !strings.HasSuffix(out, " 403") {
		t.Fatalf("two.allowed.test after network_policy dropped it: %q, want 403", out)
	}
	if out := get("one.allowed.test"); !strings.HasSuffix(out, " 200") {
		t.Fatalf("one.allowed.test after the reload: %q, want 200", out)
	}

	// Broken versions: refused, naming file and line; the last good ones stay.
	writeFile(t, def, "shell:\n  deny: 5\n")
	writeFile(t, brk, "capabilities: [\n")
	err := e.Server.Reload(context.Background())
	if err == nil || !strings.Contains(err.Error(), def) || !strings.Contains(err.Error(), def+":2: shell.deny") || !strings.Contains(err.Error(), brk) {
		t.Fatalf("Reload of broken files: %v, want errors naming %s:2 and %s", err, def, brk)
	}
	execDenied(t, alice, sb.ID, api.ExecRequest{Argv: []string{"echo", "hi"}}, "shell.deny[0]")
	if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"touch", "/workspace/blocked"}}); res.ExitCode != 0 {
		t.Fatalf("touch, allowed by the last good default policy: %+v", res)
	}
	if out := get("one.allowed.test"); !strings.HasSuffix(out, " 200") {
		t.Fatalf("one.allowed.test after a failed reload: %q, want 200", out)
	}
	if !strings.Contains(e.Logs.String(), "last good version stays in force") {
		t.Errorf("the failed reload was not logged")
	}
}
