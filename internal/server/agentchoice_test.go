package server_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/gateway"
	"github.com/paddockhq/paddock/internal/gateway/scripted"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/wire"
)

// A user's choice of provider and model is what the coding agent's next run in their
// sandbox asks, on that provider's own endpoint wherever it stands in the configuration;
// a run's flags override it, and another user keeps the server's default. A provider the
// gateway does not have, and a model name no provider uses, are refused.
func TestAgentChoice(t *testing.T) {
	names := []string{"first", "second", "claude"}
	kinds := []string{gateway.KindOpenAI, gateway.KindOpenAI, gateway.KindAnthropic}
	providers := map[string]*scripted.Provider{}
	var conf []gateway.Provider
	for i, name := range names {
		p := scripted.New(scripted.Script{Name: name, Steps: []scripted.Step{{Respond: scripted.Respond{Content: "answered by " + name, Repeat: true}}}})
		up := httptest.NewServer(p)
		t.Cleanup(up.Close)
		providers[name] = p
		conf = append(conf, gateway.Provider{Name: name, Kind: kinds[i], BaseURL: up.URL, APIKey: gateway.Secret("sk-platform-" + name)})
	}
	e := servertest.Start(t, func(c *server.Config) {
		c.Gateway = gateway.Config{AgentModel: "default-model", Providers: conf}
	})
	alice, bob := e.Register(t, "alice"), e.Register(t, "bob")

	var got api.AgentSettings
	servertest.Decode(t, bob.DoToken("GET", "/api/v1/me/agent", nil), http.StatusOK, &got)
	if got.Provider != "" || got.Model != "" || got.DefaultModel != "default-model" || fmt.Sprint(got.Providers) != "[{first openai} {second openai} {claude anthropic}]" {
		t.Errorf("bob's settings before any choice: %+v", got)
	}
	servertest.Decode(t, alice.DoToken("PUT", "/api/v1/me/agent", api.AgentChoice{Provider: "claude", Model: "chosen-model"}), http.StatusOK, &got)
	if got.Provider != "claude" || got.Model != "chosen-model" {
		t.Errorf("alice's settings after her choice: %+v", got)
	}
	for _, bad := range []struct {
		choice api.AgentChoice
		want   string
	}{
		{api.AgentChoice{Provider: "nope"}, "first, second, claude"},
		{api.AgentChoice{Model: "two words"}, "model"},
		{api.AgentChoice{Model: strings.Repeat("m", wire.MaxAgentModel+1)}, "model"},
	} {
		res := alice.DoToken("PUT", "/api/v1/me/agent", bad.choice)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), bad.want) || strings.Contains(string(body), "sk-platform") {
			t.Errorf("PUT %+v: %d %s; want 400 saying %q", bad.choice, res.StatusCode, body, bad.want)
		}
	}

	runs := 0
	run := func(c *servertest.Client, flags ...string) {
		t.Helper()
		runs++
		var sb api.Sandbox
		servertest.Decode(t, c.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: fmt.Sprintf("work%d", runs)}), http.StatusCreated, &sb)
		argv := append(append([]string{wire.AgentPath, wire.CodeSubcommand}, flags...), "--", "hello")
		if res := execIn(t, c, sb.ID, api.ExecRequest{Argv: argv, TimeoutMS: 120_000}); res.ExitCode != 0 {
			t.Fatalf("paddock-agent code %v: exit %d\nstdout %s\nstderr %s", flags, res.ExitCode, res.Stdout, res.Stderr)
		}
	}
	asked := func(name string) []string {
		var models []string
		for _, r := range providers[name].Requests() {
			models = append(models, r.API+" "+r.Model)
		}
		return models
	}
	run(alice)
	run(bob)
	run(alice, "--provider", "second", "--model", "flag-model")
	for name, want := range map[string]string{
		"claude": "[anthropic chosen-model]",
		"first":  "[openai default-model]",
		"second": "[openai flag-model]",
	} {
		if got := fmt.Sprint(asked(name)); got != want {
			t.Errorf("provider %s was asked %s; want %s", name, got, want)
		}
	}
}
