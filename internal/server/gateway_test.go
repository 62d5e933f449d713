package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/gateway"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
)

// A process in a sandbox calls an OpenAI-style API at OPENAI_BASE_URL with a key of its
// own; the provider sees the platform's key and never the sandbox's, the sandbox never
// sees the platform's, and the tokens are accounted to the user and sandbox.
func TestGatewayFromSandbox(t *testing.T) {
	const platformKey = "sk-PLATFORM-CANARY-5d1c0f"
	var mu sync.Mutex
	var seenAuth []string
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seenAuth = append(seenAuth, r.Header.Get("Authorization"))
		mu.Unlock()
		if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer "+platformKey {
			http.Error(w, `{"error":{"message":"bad key or path"}}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range []string{
			`{"choices":[{"delta":{"content":"hel"}}]}`,
			`{"choices":[{"delta":{"content":"lo"}}]}`,
			`{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5}}`,
		} {
			fmt.Fprintf(w, "data: %s\n\n", ev)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	defer provider.Close()
	e := servertest.Start(t, func(c *server.Config) {
		c.Gateway = gateway.Config{Providers: []gateway.Provider{{Name: "openai", Kind: gateway.KindOpenAI, BaseURL: provider.URL, APIKey: platformKey}}}
	})
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work"}), http.StatusCreated, &sb)

	script := `curl -sS -N -H "Authorization: Bearer $OPENAI_API_KEY" -H 'x-api-key: sandbox-own' -H 'content-type: application/json' ` +
		`-d '{"model":"m","stream":true,"messages":[]}' "$OPENAI_BASE_URL/chat/completions"; echo; env`
	res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", script}})
	out := string(res.Stdout) + string(res.Stderr)
	if res.ExitCode != 0 || !strings.Contains(out, `"content":"hel"`) || !strings.Contains(out, "data: [DONE]") {
		t.Fatalf("completion through the gateway: exit %d\n%s", res.ExitCode, out)
	}
	if strings.Contains(out, platformKey) {
		t.Fatalf("the platform key reached the sandbox:\n%s", out)
	}
	mu.Lock()
	if len(seenAuth) != 1 || seenAuth[0] != "Bearer "+platformKey {
		t.Errorf("the provider saw Authorization %q, want only the platform key", seenAuth)
	}
	mu.Unlock()

	// The tokens are the user's, from this sandbox (the event is written off the
	// response's path: poll).
	var found map[string]any
	for range 50 {
		var evs api.EventList
		servertest.Decode(t, alice.DoToken("GET", "/api/v1/events?action=gateway.usage", nil), http.StatusOK, &evs)
		if len(evs.Events) > 0 {
			found = evs.Events[0].Detail
			break
		}
		execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"true"}})
	}
	if found == nil || found["sandbox_id"] != sb.ID || found["input_tokens"] != 12.0 || found["output_tokens"] != 5.0 {
		t.Fatalf("usage event = %v", found)
	}
	// The day's count is in the store, where budgets survive a restart.
	if n, err := e.Server.GatewaySpent(alice.User.ID, "openai"); err != nil || n != 17 {
		t.Fatalf("ledger in the store: %d %v, want 17 tokens", n, err)
	}
	// The metrics carry counts, never a key.
	body := e.Metrics(t)
	if strings.Contains(string(body), platformKey) || !strings.Contains(string(body), `paddock_gateway_tokens_total`) {
		t.Errorf("metrics: key present or no token counter")
	}
	raw, _ := json.Marshal(found)
	if strings.Contains(string(raw), platformKey) {
		t.Errorf("usage event carries the key")
	}
}
