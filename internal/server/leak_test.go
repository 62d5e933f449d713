package server_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/gateway"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/wire"
)

// TestNothingLeaks is ADR-0003's boundary as a test: canaries are set as platform secrets
// (the provider gateway's key, the secrets key-encryption key) and as a user secret; the
// test drives sandboxes through every path (start, exec, a PTY and a streaming exec over
// WebSocket, broker allow and deny, gateway calls, client errors, an app that crashes,
// logs at debug level), then searches the database file, the audit log, every log line,
// every WebSocket frame, the metrics and the sandbox's whole view (env, every
// /proc/*/environ, its files) for them.
//
// Platform canaries must appear nowhere. The user's canary may appear only in a sandbox of
// that user's that asked the broker for it, and in what that sandbox printed.
func TestNothingLeaks(t *testing.T) {
	const (
		providerKey = "sk-PLATFORM-PROVIDER-CANARY-91ab"
		userSecret  = "ghp_USER-SECRET-CANARY-44c2"
	)
	kek := bytes.Repeat([]byte("K"), 32)
	kekEnv := base64.StdEncoding.EncodeToString(kek)
	t.Setenv("PADDOCK_SECRETS_KEY", kekEnv)
	platform := []string{providerKey, kekEnv}

	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+providerKey {
			// As OpenAI does: the refused key, partly quoted, in the error.
			http.Error(w, `{"error":{"message":"Incorrect API key provided: `+r.Header.Get("Authorization")+`"}}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
	}))
	defer provider.Close()
	policy := filepath.Join(t.TempDir(), "broker.yaml")
	if err := os.WriteFile(policy, []byte(brokerPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	e := servertest.Start(t, func(c *server.Config) {
		c.BrokerPolicy = policy
		c.Gateway = gateway.Config{Providers: []gateway.Provider{{Name: "openai", Kind: gateway.KindOpenAI, BaseURL: provider.URL, APIKey: providerKey}}}
	})
	alice, bob := e.Register(t, "alice"), e.Register(t, "bob")
	resp := alice.DoToken("PUT", "/api/v1/me/secrets/github_token", map[string]string{"value": userSecret})
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT secret: %s", resp.Status)
	}
	var observed bytes.Buffer // everything a client or a sandbox saw
	record := func(b []byte) { observed.Write(b); observed.WriteByte('\n') }

	// The live sandbox (the welcome app) and a sandbox of alice's own; bob's.
	var roles api.Roles
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/roles", nil), http.StatusOK, &roles)
	var sb, bobSB api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work"}), http.StatusCreated, &sb)
	servertest.Decode(t, bob.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work"}), http.StatusCreated, &bobSB)

	// The sandboxes' whole view before any grant: env, every process's environ, files.
	view := `env; for f in /proc/[0-9]*/environ; do cat "$f" 2>/dev/null; echo; done; grep -rasI . /workspace /tmp /etc 2>/dev/null | head -c 2000000`
	before := map[string][]byte{}
	for _, x := range []struct {
		c  *servertest.Client
		id string
	}{{alice, roles.Live.ID}, {alice, sb.ID}, {bob, bobSB.ID}} {
		res := execIn(t, x.c, x.id, api.ExecRequest{Argv: []string{"sh", "-c", view}, MaxOutputBytes: 4 << 20})
		before[x.id] = append(res.Stdout, res.Stderr...)
		if !strings.Contains(string(res.Stdout), "PADDOCK_SERVICES_URL=") {
			t.Fatalf("the view of %s is not a view: %.300s", x.id, res.Stdout)
		}
	}
	for id, v := range before {
		for _, c := range append(platform, userSecret) {
			if bytes.Contains(v, []byte(c)) {
				t.Errorf("sandbox %s sees %q before asking for anything", id, c)
			}
		}
	}

	// Broker: allow (alice), deny (bob, and alice's unknown capability).
	record(secretCmd(t, alice, sb.ID, "get", "github").Stdout)
	for _, r := range []api.ExecResult{secretCmd(t, bob, bobSB.ID, "get", "github"), secretCmd(t, alice, sb.ID, "get", "aws")} {
		record(r.Stdout)
		record(r.Stderr)
		if bytes.Contains(append(r.Stdout, r.Stderr...), []byte(userSecret)) {
			t.Errorf("a denial carries the user's secret: %s %s", r.Stdout, r.Stderr)
		}
	}
	// Gateway: a good call, and one the provider refuses with the key quoted in its error.
	call := `curl -sS -H 'content-type: application/json' -d '{"model":"m","messages":[]}' "$OPENAI_BASE_URL/chat/completions"; echo`
	for _, env := range [][]string{nil, {"OPENAI_BASE_URL=" + "http://127.0.0.1:4750/gateway/openai/v1/../../openai/v1"}} {
		res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", call}, Env: env})
		record(res.Stdout)
		record(res.Stderr)
	}
	// The coding agent: a turn through the gateway (it stops, as the answer is not a
	// stream), its events and its conversation file.
	agentRun := wire.AgentPath + " code --model m -- hello; cat /tmp/.paddock-agent/conversation.json"
	for _, env := range [][]string{nil, {"OPENAI_BASE_URL=" + "http://127.0.0.1:4750/gateway/openai/v1/../../openai/v1"}} {
		res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", agentRun}, Env: env})
		if !bytes.Contains(res.Stdout, []byte(`"type":"done"`)) {
			t.Errorf("the coding agent's turn did not end: %s %s", res.Stdout, res.Stderr)
		}
		record(res.Stdout)
		record(res.Stderr)
	}
	// Client errors and a crash: bad JSON, a bad ID, a missing file, an app killed.
	for _, req := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/api/v1/sandboxes", strings.NewReader(`{"name":`)},
		{"GET", "/api/v1/sandboxes/sb-nope", nil},
		{"GET", "/api/v1/sandboxes/" + sb.ID + "/files/content?path=missing", nil},
		{"PUT", "/api/v1/me/secrets/Bad Name", map[string]string{"value": "x"}},
	} {
		resp := alice.DoToken(req.method, req.path, req.body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		record(b)
	}
	record(execIn(t, alice, roles.Live.ID, api.ExecRequest{Argv: []string{"sh", "-c", "pkill -9 -f welcome || true"}}).Stderr)

	// A streaming exec and a PTY over WebSocket: every frame is recorded.
	cl := paddock.New(e.URL, paddock.WithToken(alice.Token))
	for _, start := range []api.StreamStart{
		{Argv: []string{"sh", "-c", wire.AgentPath + " secret get github 2>&1; env"}},
		{Argv: []string{"sh", "-c", "env; exit 3"}, TTY: &api.TTYSize{Rows: 24, Cols: 80}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		s, err := cl.Sandbox(sb.ID).Stream(ctx, start)
		if err != nil {
			t.Fatal(err)
		}
		for {
			out, err := s.Next(ctx)
			if err != nil {
				break
			}
			record(out.Data)
			if out.Exit != nil {
				break
			}
		}
		s.Close()
		cancel()
	}
	// Stop alice's sandbox: its leases are revoked (audited), a failure path of its own.
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/stop", nil), http.StatusOK, nil)

	// Now search: the metrics, then the database file (WAL included), which holds the
	// audit log and the event store, and every log line.
	metrics := []byte(e.Metrics(t))
	record(metrics)
	e.Stop(true)
	dbBytes := readAll(t, filepath.Join(e.Config.Runner.DataDir, "paddock.db"), filepath.Join(e.Config.Runner.DataDir, "paddock.db-wal"))
	logs := e.Logs.String()
	for _, c := range append(platform, userSecret) {
		if bytes.Contains(dbBytes, []byte(c)) {
			t.Errorf("the database holds %q in the clear", c)
		}
		if strings.Contains(logs, c) {
			t.Errorf("a log line holds %q", c)
		}
	}
	for _, c := range platform {
		if bytes.Contains(observed.Bytes(), []byte(c)) {
			t.Errorf("a client or sandbox saw the platform secret %q", c)
		}
	}
	if bytes.Contains(metrics, []byte(userSecret)) {
		t.Errorf("the metrics hold the user's secret")
	}
	if !bytes.Contains(observed.Bytes(), []byte(userSecret)) {
		t.Errorf("alice's sandbox never got her secret: the test drove nothing")
	}
	if !strings.Contains(logs, "level=DEBUG") {
		t.Errorf("no debug logging captured: the search proves nothing")
	}
}

func readAll(t *testing.T, paths ...string) []byte {
	t.Helper()
	var all []byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	return all
}
