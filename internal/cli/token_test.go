package cli_test

import (
	"context"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/servertest"
)

// `paddock login` still signs in; `paddock token` lists tokens with their scopes and
// expiry and makes narrower ones; `paddock invite` is an admin's.
func TestTokenAndInviteCommands(t *testing.T) {
	e := servertest.Start(t)
	_, adminPW, err := e.Server.FirstAdmin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	e.Register(t, "alice")
	signedOut(t)
	mustRemote(t, "correct horse battery alice\n", "login", e.URL, "-u", "alice", "--password-stdin")
	secret := strings.TrimSpace(mustRemote(t, "", "token", "create", "ci", "--scope", "read", "--expires", "2h"))
	if !strings.HasPrefix(secret, "pdk_") {
		t.Fatalf("token create printed %q", secret)
	}
	list := mustRemote(t, "", "token", "ls")
	if !strings.Contains(list, "SCOPES") || !strings.Contains(list, "EXPIRES") || !strings.Contains(list, "ci") ||
		!strings.Contains(list, "read,write,tokens") || !strings.Contains(list, "(in 1h") {
		t.Errorf("token ls:\n%s", list)
	}
	wantFailure(t, "", `scope "sudo"`, "token", "create", "x", "--scope", "sudo")
	wantFailure(t, "", "max_ttl", "token", "create", "x", "--expires", "100000h")
	// The read-only token can read but not mint.
	t.Setenv("PADDOCK_TOKEN", secret)
	t.Setenv("PADDOCK_SERVER", e.URL)
	mustRemote(t, "", "sandbox", "ls")
	wantFailure(t, "", `scope "tokens"`, "token", "create", "more")
	wantFailure(t, "", "for admins only", "invite", "create")

	signedOut(t)
	mustRemote(t, adminPW+"\n", "login", e.URL, "-u", "admin", "--password-stdin")
	code := strings.TrimSpace(mustRemote(t, "", "invite", "create", "--uses", "2", "--expires", "24h"))
	if !strings.HasPrefix(code, "inv_") {
		t.Fatalf("invite create printed %q", code)
	}
	if ls := mustRemote(t, "", "invite", "ls"); !strings.Contains(ls, "0/2") || strings.Contains(ls, code) {
		t.Errorf("invite ls:\n%s", ls)
	}
}
