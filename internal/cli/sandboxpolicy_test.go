package cli_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
)

// paddock sandbox policy set, get and rm against a real server and sandbox: the policy
// set is enforced on exec, a bad one is refused with its line and field.
func TestSandboxPolicyCommands(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	signedOut(t)
	t.Setenv("PADDOCK_SERVER", e.URL)
	t.Setenv("PADDOCK_TOKEN", alice.Token)
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{}), http.StatusCreated, &sb)
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	const text = "shell:\n  deny: [\"touch /workspace/x\"]\n"
	if err := os.WriteFile(good, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("shell:\n  deny: [\"touch /workspace/x\"]\n  nope: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	if out := mustRemote(t, "", "sandbox", "policy", "get", sb.ID); !strings.Contains(out, "no policy is in force") {
		t.Errorf("get with none: %q", out)
	}
	if out := mustRemote(t, "", "sandbox", "policy", "set", sb.ID, good); out != sb.ID+": policy attached\nshell: 1 deny pattern; files: no rules; network: default deny\n" {
		t.Errorf("set: %q", out)
	}
	out := mustRemote(t, "", "sandbox", "policy", "get", sb.ID)
	if !strings.HasPrefix(out, "# "+sb.ID+": the sandbox's own policy, attached ") || !strings.HasSuffix(out, "\n"+text) {
		t.Errorf("get: %q", out)
	}
	wantFailure(t, "", bad+":3: shell.nope: unknown field", "sandbox", "policy", "set", sb.ID, bad)
	wantFailure(t, "", "rule shell.deny[0]", "sandbox", "exec", sb.ID, "--", "touch", "/workspace/x")
	if out := mustRemote(t, "", "sandbox", "policy", "get", sb.ID); !strings.HasSuffix(out, "\n"+text) {
		t.Errorf("after a refused set the policy changed: %q", out)
	}
	// From standard input too.
	mustRemote(t, text, "sandbox", "policy", "set", sb.ID, "-")
	if out := mustRemote(t, "", "sandbox", "policy", "rm", sb.ID); out != sb.ID+": policy detached\n" {
		t.Errorf("rm: %q", out)
	}
	wantFailure(t, "", "has no policy of its own", "sandbox", "policy", "rm", sb.ID)
	mustRemote(t, "", "sandbox", "exec", sb.ID, "--", "touch", "/workspace/x")
	wantFailure(t, "", "not found", "sandbox", "policy", "get", "sb-aaaaaaaaaa")
}
