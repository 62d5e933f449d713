package server_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/gateway"
	"github.com/paddockhq/paddock/internal/gateway/scripted"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
)

// codex is the Codex CLI's binary as make setup installs it (tests/agents), under the
// host's /usr, which container sandboxes see.
const codex = "/usr/local/lib/paddock/agents/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"

// codexRecipe runs Codex in a sandbox against the gateway (docs/agent.md's recipe): a
// model provider of its own on OPENAI_BASE_URL speaking the Responses API, its state in
// $HOME/.codex, without its own sandbox (the paddock sandbox is the boundary).
const codexRecipe = `export CODEX_HOME="$HOME/.codex"
mkdir -p "$CODEX_HOME"
cat > "$CODEX_HOME/config.toml" <<EOF
model = "$PADDOCK_AGENT_MODEL"
model_provider = "paddock"
check_for_update_on_startup = false

[model_providers.paddock]
name = "paddock gateway"
base_url = "$OPENAI_BASE_URL"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
EOF
cd /workspace && exec "$CODEX" exec --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox "$1"
`

// OpenAI's Codex CLI, which speaks only the Responses API, runs in a sandbox against the
// gateway (a scripted model behind it): it runs a command that edits the page, the edit
// lands in the workspace and on its timeline, and the gateway counts its tokens.
func TestCodexInSandbox(t *testing.T) {
	if _, err := os.Stat(codex); err != nil {
		t.Fatalf("Codex is not installed (%v): run make setup", err)
	}
	sc, err := scripted.Parse([]byte(`{"steps": [
	  {"expect": {"model": "scripted-model", "last_role": "user", "last_contains": ["make the header blue"], "tools": ["exec_command"]},
	   "respond": {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "sed -i 's/color: red/color: blue/' index.html && cat index.html"}}],
	               "usage": {"prompt_tokens": 1000, "completion_tokens": 20}}},
	  {"expect": {"last_role": "tool", "last_contains": ["color: blue", "exited with code 0"]},
	   "respond": {"content": "The header is blue.", "usage": {"prompt_tokens": 1100, "completion_tokens": 6}}}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	provider := scripted.New(sc)
	up := httptest.NewServer(provider)
	defer up.Close()
	e := servertest.Start(t, func(c *server.Config) {
		c.Gateway = gateway.Config{AgentModel: "scripted-model", Providers: []gateway.Provider{
			{Name: "scripted", Kind: gateway.KindOpenAI, BaseURL: up.URL, APIKey: "sk-platform", TokensPerDay: 1_000_000}}}
	})
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work"}), http.StatusCreated, &sb)
	execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", `echo '<h1 style="color: red">Hi</h1>' > /workspace/index.html`}})
	var before api.History
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+sb.ID+"/history", nil), http.StatusOK, &before)

	res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", codexRecipe, "codex", "make the header blue"},
		Env: []string{"CODEX=" + codex}, TimeoutMS: 240_000})
	if res.ExitCode != 0 || provider.Err() != nil || !provider.Done() {
		t.Fatalf("codex: exit %d (%s)\nstdout %s\nstderr %s\nscript: %v (done %v)", res.ExitCode, res.Limit, res.Stdout, res.Stderr, provider.Err(), provider.Done())
	}
	for _, r := range provider.Requests() {
		if r.API != "responses" || !r.Stream {
			t.Errorf("Codex asked %s (stream %v), not a streamed Responses API request", r.API, r.Stream)
		}
	}
	if got := fileContent(t, alice, sb.ID, "index.html"); got != "<h1 style=\"color: blue\">Hi</h1>\n" {
		t.Errorf("index.html after Codex's edit: %q", got)
	}
	var after api.History
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+sb.ID+"/history", nil), http.StatusOK, &after)
	if after.Current == before.Current {
		t.Fatalf("Codex's edit is not on the timeline: %+v", after)
	}
	var d api.HistoryDiff
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+sb.ID+"/history/diff?from="+before.Current+"&to="+after.Current, nil), http.StatusOK, &d)
	if !strings.Contains(strings.Join(d.Changed, " "), "index.html") {
		t.Errorf("the timeline's change: %+v", d)
	}
	if !strings.Contains(string(res.Stdout)+string(res.Stderr), "The header is blue.") {
		t.Errorf("Codex's answer is not in its output:\n%s\n%s", res.Stdout, res.Stderr)
	}
	// Codex's tokens count against the user's budget, as every provider's do.
	if n, err := e.Server.GatewaySpent(alice.User.ID, "scripted"); err != nil || n != 1000+20+1100+6 {
		t.Errorf("the user's tokens spent today: %d %v, want 2126", n, err)
	}
}
