package server_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/browsertest"
	"github.com/paddockhq/paddock/internal/gateway"
	"github.com/paddockhq/paddock/internal/gateway/scripted"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
)

// The desktop's Agent pane in a real browser, against a scripted model behind the real
// gateway (tests/browser/desktop-agent.mjs says what): a turn's steps show as they
// happen, its edit lands, one click undoes it; the agent killed mid-turn is rolled back
// and said so; the provider rate-limited, down and the budget spent each say so; the
// conversation survives a reload. The budget is far above the turns before the one that
// spends it: a killed turn is charged an estimate of its prompt. Screenshots go under
// the test's temp dir (SCREENSHOT_DIR/desktop-agent when set).
func TestBrowserDesktopAgent(t *testing.T) {
	sc, err := scripted.Load("testdata/agent_desktop.json")
	if err != nil {
		t.Fatal(err)
	}
	provider := scripted.New(sc)
	up := httptest.NewServer(provider)
	defer up.Close()
	// other is reached only once the pane chooses it.
	other := scripted.New(scripted.Script{Name: "other", Steps: []scripted.Step{{Respond: scripted.Respond{Content: "Other here.", Repeat: true}}}})
	upOther := httptest.NewServer(other)
	defer upOther.Close()
	e := servertest.Start(t, func(c *server.Config) {
		c.App = server.AppConfig{Command: []string{"/usr/bin/perl", "-e", crashingServer}, Port: 8080, Build: "static"}
		c.Gateway = gateway.Config{AgentModel: "scripted-model", Providers: []gateway.Provider{
			{Name: "scripted", Kind: gateway.KindOpenAI, BaseURL: up.URL, APIKey: "sk-platform", TokensPerDay: 100_000},
			{Name: "other", Kind: gateway.KindOpenAI, BaseURL: upOther.URL, APIKey: "sk-platform"}}}
	})
	alice := e.Register(t, "alice")
	alice.Start()
	var roles api.Roles
	alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &roles)
	if res := execIn(t, alice, roles.Live.ID, api.ExecRequest{Argv: []string{"sh", "-c", `echo '<h1 style="color: red">Hi</h1>' > /workspace/index.html`}}); res.ExitCode != 0 {
		t.Fatalf("writing index.html: %+v", res)
	}
	shots := filepath.Join(t.TempDir(), "screenshots")
	if d := os.Getenv("SCREENSHOT_DIR"); d != "" {
		shots = filepath.Join(d, "desktop-agent")
	}
	env := map[string]string{
		"BASE_URL": e.URL, "USERNAME": "alice", "PASSWORD": "correct horse battery alice",
		"SANDBOX": roles.Live.ID, "SHOTS": shots,
	}
	t.Log(browsertest.RunFor(t, "desktop-agent", env, 4*time.Minute))
	if err := provider.Err(); err != nil || !provider.Done() {
		t.Errorf("the script: %v (done %v)", err, provider.Done())
	}
	var asked []string
	for _, r := range other.Requests() {
		asked = append(asked, r.Model)
	}
	if fmt.Sprint(asked) != "[picked-in-pane]" {
		t.Errorf("the provider chosen in the pane was asked for models %v; want [picked-in-pane]", asked)
	}
	for _, name := range []string{"agent", "agent-killed", "agent-rate-limited", "agent-out-of-budget", "agent-reloaded", "agent-choice"} {
		if _, err := os.Stat(filepath.Join(shots, name+".png")); err != nil {
			t.Errorf("no screenshot of %s: %v", name, err)
		}
	}
}
