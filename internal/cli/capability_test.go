package cli_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
)

// paddock sandbox capability mint, narrow, ls and revoke against a real server: the
// minted token works as PADDOCK_TOKEN within its grant, a narrowed one within less, and
// neither after the revocation.
func TestCapabilityCommands(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	signedOut(t)
	t.Setenv("PADDOCK_SERVER", e.URL)
	t.Setenv("PADDOCK_TOKEN", alice.Token)
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{}), http.StatusCreated, &sb)

	tok := strings.TrimSpace(mustRemote(t, "", "sandbox", "capability", "mint", sb.ID, "exec:*", "exec", "--ttl", "10m"))
	if !strings.HasPrefix(tok, "pdk1.") || strings.Contains(tok, "\n") {
		t.Fatalf("mint printed %q, want one token", tok)
	}
	narrow := strings.TrimSpace(mustRemote(t, tok, "sandbox", "capability", "narrow", "-", "--resource", "exec:echo"))
	wantFailure(t, "", "--ttl", "sandbox", "capability", "mint", sb.ID, "exec:*", "exec", "--ttl", "1500ms")
	wantFailure(t, "", "action", "sandbox", "capability", "mint", sb.ID, "file:/workspace", "fly")

	t.Setenv("PADDOCK_TOKEN", narrow)
	if out := mustRemote(t, "", "sandbox", "exec", sb.ID, "--", "echo", "narrowed"); out != "narrowed\n" {
		t.Errorf("exec under the narrowed token: %q", out)
	}
	wantFailure(t, "", "resource exec:ls outside exec:echo", "sandbox", "exec", sb.ID, "--", "ls")
	wantFailure(t, "", "acts only on its sandbox's exec and file routes", "sandbox", "ls")
	t.Setenv("PADDOCK_TOKEN", tok)
	mustRemote(t, "", "sandbox", "exec", sb.ID, "--", "ls", "/")

	t.Setenv("PADDOCK_TOKEN", alice.Token)
	out := mustRemote(t, "", "sandbox", "capability", "ls", sb.ID)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "exec:*") || !strings.HasSuffix(lines[1], "valid") {
		t.Fatalf("ls: %q", out)
	}
	id := strings.Fields(lines[1])[0]
	if got := mustRemote(t, "", "sandbox", "capability", "revoke", sb.ID, id); got != "capability "+id+" revoked\n" {
		t.Errorf("revoke: %q", got)
	}
	if out := mustRemote(t, "", "sandbox", "capability", "ls", sb.ID); !strings.Contains(out, "revoked") {
		t.Errorf("ls after revoke: %q", out)
	}
	t.Setenv("PADDOCK_TOKEN", narrow)
	wantFailure(t, "", "revoked", "sandbox", "exec", sb.ID, "--", "echo", "x")
}
