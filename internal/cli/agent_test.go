package cli_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/gateway"
	"github.com/paddockhq/paddock/internal/gateway/scripted"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
)

const agentScript = `{"name": "cli", "steps": [
  {"expect": {"model": "picked-by-flag", "last_contains": ["make the header blue"]},
   "respond": {"content": "Looking.", "tool_calls": [{"name": "edit_file", "arguments": {"path": "index.html", "old_string": "red", "new_string": "blue"}}]}},
  {"expect": {"last_role": "tool", "last_contains": ["edited index.html"]}, "respond": {"content": "The header is blue now."}},
  {"expect": {"last_contains": ["and the footer"]}, "respond": {"content": "I will now", "cut_after": 2}}
]}`

// paddock agent runs a turn in the sandbox and shows each step as a person reads it; a
// turn that stops says why and exits 1.
func TestAgentCommand(t *testing.T) {
	sc, err := scripted.Parse([]byte(agentScript))
	if err != nil {
		t.Fatal(err)
	}
	provider := scripted.New(sc)
	up := httptest.NewServer(provider)
	defer up.Close()
	// q, second in the list and Anthropic's, is reached only by choosing it.
	q := scripted.New(scripted.Script{Name: "q", Steps: []scripted.Step{{Respond: scripted.Respond{Content: "q here.", Repeat: true}}}})
	upQ := httptest.NewServer(q)
	defer upQ.Close()
	e := servertest.Start(t, func(c *server.Config) {
		c.Gateway = gateway.Config{Providers: []gateway.Provider{{Name: "p", Kind: gateway.KindOpenAI, BaseURL: up.URL, APIKey: "sk-platform"},
			{Name: "q", Kind: gateway.KindAnthropic, BaseURL: upQ.URL, APIKey: "sk-platform"}}}
	})
	alice := e.Register(t, "alice")
	signedOut(t)
	t.Setenv("PADDOCK_SERVER", e.URL)
	t.Setenv("PADDOCK_TOKEN", alice.Token)
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{}), http.StatusCreated, &sb)
	mustRemote(t, "", "sandbox", "exec", sb.ID, "--", "sh", "-c", "echo 'h1 { color: red }' > /workspace/index.html")

	wantFailure(t, "", `--api "gemini": want openai or anthropic`, "agent", sb.ID, "--api", "gemini", "hi")
	out := mustRemote(t, "", "agent", sb.ID, "--model", "picked-by-flag", "--api", "openai", "make", "the header blue")
	for _, want := range []string{
		"turn 1: make the header blue\n", "Looking.\n> edit_file {", "  ok: edited index.html", "\ncheckpoint ", "The header is blue now.\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("paddock agent printed\n%s\nwithout %q", out, want)
		}
	}
	if got := mustRemote(t, "", "sandbox", "exec", sb.ID, "--", "cat", "/workspace/index.html"); got != "h1 { color: blue }\n" {
		t.Errorf("index.html: %q", got)
	}

	out, _, code := remote(t, "", "agent", sb.ID, "--model", "picked-by-flag", "and the footer")
	if code != 1 || !strings.Contains(out, "stopped (stream_cut): the provider's answer broke off") {
		t.Errorf("a cut stream: exit %d\n%s", code, out)
	}
	if err := provider.Err(); err != nil {
		t.Error(err)
	}

	// The choice kept by the server is what the next run asks; --provider and --model
	// choose for one run.
	if out := mustRemote(t, "", "agent", "config"); !strings.Contains(out, "providers: p (openai) q (anthropic)") {
		t.Errorf("paddock agent config printed\n%s", out)
	}
	wantFailure(t, "", `provider "nope": not one of the gateway's providers (p, q)`, "agent", "config", "--provider", "nope")
	wantFailure(t, "", `--provider "nope": not one of the gateway's providers (p, q)`, "agent", sb.ID, "--provider", "nope", "hi")
	wantFailure(t, "", `--model: model "a b"`, "agent", sb.ID, "--model", "a b", "hi")
	if out := mustRemote(t, "", "agent", "config", "--provider", "q", "--model", "chosen"); !strings.Contains(out, "provider: q\nmodel:    chosen\n") {
		t.Errorf("paddock agent config --provider q --model chosen printed\n%s", out)
	}
	mustRemote(t, "", "agent", sb.ID, "--reset", "hello")
	mustRemote(t, "", "agent", "config", "--model", "")
	mustRemote(t, "", "agent", sb.ID, "--reset", "--model", "for-one-run", "hello")
	var asked []string
	for _, r := range q.Requests() {
		asked = append(asked, r.API+" "+r.Model)
	}
	if got := strings.Join(asked, ", "); got != "anthropic chosen, anthropic for-one-run" {
		t.Errorf("provider q was asked: %s", got)
	}
	if out := mustRemote(t, "", "agent", "config", "--reset"); !strings.Contains(out, "provider: (the server's default") {
		t.Errorf("paddock agent config --reset printed\n%s", out)
	}
}
