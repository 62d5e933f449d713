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

// openCode is OpenCode's binary as make setup installs it (tests/agents), under the
// host's /usr, which container sandboxes see.
const openCode = "/usr/local/lib/paddock/agents/node_modules/opencode-linux-x64/bin/opencode"

// openCodeRecipe runs OpenCode in a sandbox against the gateway (docs/agent.md's
// recipe): its OpenAI-compatible provider on OPENAI_BASE_URL, the small model (titles)
// on the provider named titles, nothing fetched or updated.
const openCodeRecipe = `export OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_LSP_DOWNLOAD=1 OPENCODE_DISABLE_DEFAULT_PLUGINS=1
titles=$(echo "$OPENAI_BASE_URL" | sed 's|/gateway/[^/]*/v1$|/gateway/titles/v1|')
export OPENCODE_CONFIG_CONTENT='{"model": "paddock/'"$PADDOCK_AGENT_MODEL"'", "small_model": "titles/small", "share": "disabled", "autoupdate": false,
 "provider": {
  "paddock": {"npm": "@ai-sdk/openai-compatible", "options": {"baseURL": "'"$OPENAI_BASE_URL"'", "apiKey": "{env:OPENAI_API_KEY}"}, "models": {"'"$PADDOCK_AGENT_MODEL"'": {}}},
  "titles": {"npm": "@ai-sdk/openai-compatible", "options": {"baseURL": "'"$titles"'", "apiKey": "{env:OPENAI_API_KEY}"}, "models": {"small": {}}}}}'
cd /workspace && exec "$OPENCODE" run "$1"
`

// OpenCode, a published agent CLI, runs in a sandbox against the gateway (a scripted
// model behind it): it reads the page and edits it, and the edit lands in the workspace
// and on its timeline.
func TestOpenCodeInSandbox(t *testing.T) {
	if _, err := os.Stat(openCode); err != nil {
		t.Fatalf("OpenCode is not installed (%v): run make setup", err)
	}
	sc, err := scripted.Parse([]byte(`{"steps": [
	  {"expect": {"model": "scripted-model", "last_role": "user", "last_contains": ["make the header blue"], "tools": ["read", "edit"]},
	   "respond": {"tool_calls": [{"name": "read", "arguments": {"filePath": "/workspace/index.html"}}]}},
	  {"expect": {"last_role": "tool", "last_contains": ["color: red"]},
	   "respond": {"tool_calls": [{"name": "edit", "arguments": {"filePath": "/workspace/index.html", "oldString": "color: red", "newString": "color: blue"}}]}},
	  {"expect": {"last_role": "tool"}, "respond": {"content": "The header is blue."}}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	titles, err := scripted.Parse([]byte(`{"steps": [{"expect": {"model": "small"}, "respond": {"content": "Header colour", "repeat": true}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	provider, titler := scripted.New(sc), scripted.New(titles)
	up, upTitles := httptest.NewServer(provider), httptest.NewServer(titler)
	defer up.Close()
	defer upTitles.Close()
	e := servertest.Start(t, func(c *server.Config) {
		c.Gateway = gateway.Config{AgentModel: "scripted-model", Providers: []gateway.Provider{
			{Name: "scripted", Kind: gateway.KindOpenAI, BaseURL: up.URL, APIKey: "sk-platform"},
			{Name: "titles", Kind: gateway.KindOpenAI, BaseURL: upTitles.URL, APIKey: "sk-platform"}}}
	})
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work",
		// OpenCode (a Bun program) and its files under HOME, on the sandbox's tmpfs, take
		// more than the default memory limit allows at times.
		Limits: api.Limits{Memory: "1G"}}), http.StatusCreated, &sb)
	execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", `echo '<h1 style="color: red">Hi</h1>' > /workspace/index.html`}})
	var before api.History
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+sb.ID+"/history", nil), http.StatusOK, &before)

	res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", openCodeRecipe, "opencode", "make the header blue"},
		Env: []string{"OPENCODE=" + openCode}, TimeoutMS: 240_000})
	if res.ExitCode != 0 || provider.Err() != nil || !provider.Done() {
		t.Fatalf("opencode: exit %d (%s)\nstdout %s\nstderr %s\nscript: %v (done %v)", res.ExitCode, res.Limit, res.Stdout, res.Stderr, provider.Err(), provider.Done())
	}
	if got := fileContent(t, alice, sb.ID, "index.html"); got != "<h1 style=\"color: blue\">Hi</h1>\n" {
		t.Errorf("index.html after OpenCode's edit: %q", got)
	}
	var after api.History
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+sb.ID+"/history", nil), http.StatusOK, &after)
	if after.Current == before.Current {
		t.Fatalf("OpenCode's edit is not on the timeline: %+v", after)
	}
	var d api.HistoryDiff
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+sb.ID+"/history/diff?from="+before.Current+"&to="+after.Current, nil), http.StatusOK, &d)
	if !strings.Contains(strings.Join(d.Changed, " "), "index.html") {
		t.Errorf("the timeline's change: %+v", d)
	}
	if !strings.Contains(string(res.Stdout), "The header is blue.") {
		t.Errorf("OpenCode's answer is not in its output:\n%s", res.Stdout)
	}
}
