package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/store/pgtest"
	"github.com/paddockhq/paddock/internal/testenv"
)

// bearerRT adds an API token to every request.
type bearerRT struct {
	token string
	next  http.RoundTripper
}

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// roundRobin sends each request to the next of addrs, as a load balancer without
// affinity would.
type roundRobin struct {
	addrs []string
	n     atomic.Int64
	next  http.RoundTripper
}

func (rr *roundRobin) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.URL.Host = rr.addrs[int(rr.n.Add(1))%len(rr.addrs)]
	r.Host = r.URL.Host
	return rr.next.RoundTrip(r)
}

// mcpTo connects the official Go SDK's MCP client to r's /mcp with token.
func mcpTo(t *testing.T, r *replica, token string) *sdk.ClientSession {
	t.Helper()
	return mcpThrough(t, r, token, servertest.Transport())
}

// mcpThrough is mcpTo with the requests sent by tr.
func mcpThrough(t *testing.T, r *replica, token string, tr http.RoundTripper) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	hc := &http.Client{Transport: bearerRT{token, tr}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: r.url + "/mcp", HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("MCP client to %s: %v", r.id, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// tool calls a tool through cs; it returns whether the result is an error, its text and
// its structured content as JSON.
func tool(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) (bool, string, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	data, _ := json.Marshal(res.StructuredContent)
	return res.IsError, text.String(), data
}

// An MCP client connected to one replica runs the tools on a sandbox another replica
// runs: the call goes to that replica's API over the hop, with the caller's token, which
// that replica checks again (a read-only token stays read-only); its errors come back in
// the same words as through the sandbox's own replica; once that replica is dead, a call
// is an error naming it, answered at once.
func TestReplicasMCP(t *testing.T) {
	testenv.RequireRoot(t)
	dbURL := pgtest.URL(t)
	rs := startReplicas(t, dbURL, 2)
	alice := (&servertest.Env{URL: rs[0].url}).Register(t, "alice")
	var roles api.Roles
	alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &roles)
	dev := roles.Dev.ID

	far, near := mcpTo(t, rs[1], alice.Token), mcpTo(t, rs[0], alice.Token)
	if isErr, text, _ := tool(t, far, "write_file", map[string]any{"sandbox": dev, "path": "far.txt", "content": "written through r2\n"}); isErr {
		t.Fatalf("write_file through r2 on r1's sandbox: %s", text)
	}
	if isErr, text, data := tool(t, near, "read_file", map[string]any{"sandbox": dev, "path": "far.txt"}); isErr || !strings.Contains(string(data), "written through r2") {
		t.Errorf("far.txt through r1: %v %s %s", isErr, text, data)
	}
	isErr, text, data := tool(t, far, "run_command", map[string]any{"sandbox": dev, "argv": []string{"sh", "-c", "cat far.txt; exit 3"}})
	var run struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
	}
	if json.Unmarshal(data, &run); isErr || run.ExitCode != 3 || run.Stdout != "written through r2\n" {
		t.Errorf("run_command through r2: %v %s %s", isErr, text, data)
	}
	if isErr, text, data := tool(t, far, "list_files", map[string]any{"sandbox": dev, "path": "."}); isErr || !strings.Contains(string(data), "far.txt") {
		t.Errorf("list_files through r2: %v %s %s", isErr, text, data)
	}
	if isErr, text, data := tool(t, far, "history", map[string]any{"sandbox": dev}); isErr || !strings.Contains(string(data), "checkpoints") {
		t.Errorf("history through r2: %v %s %s", isErr, text, data)
	}

	// The same error, in the same words, through either replica.
	missing := map[string]any{"sandbox": dev, "path": "nowhere.txt"}
	farErr, farText, _ := tool(t, far, "read_file", missing)
	nearErr, nearText, _ := tool(t, near, "read_file", missing)
	if !farErr || !nearErr || farText != nearText {
		t.Errorf("a missing file: through r2 %v %q, through r1 %v %q: want the same error", farErr, farText, nearErr, nearText)
	}

	// The MCP server is stateless: a client whose requests alternate between the
	// replicas, its initialization on one and its calls on either, works throughout.
	rr := mcpThrough(t, rs[0], alice.Token, &roundRobin{addrs: []string{rs[0].addr, rs[1].addr}, next: servertest.Transport()})
	for i := range 4 {
		if isErr, text, data := tool(t, rr, "read_file", map[string]any{"sandbox": dev, "path": "far.txt"}); isErr || !strings.Contains(string(data), "written through r2") {
			t.Errorf("read_file %d with requests alternating between the replicas: %v %s %s", i, isErr, text, data)
		}
	}

	// A read-only token reads through r2 and may not write there.
	var ro api.Token
	alice.MustJSON("POST", "/api/v1/tokens", api.CreateTokenRequest{Name: "ro", Scopes: []string{"read"}}, http.StatusCreated, &ro)
	reader := mcpTo(t, rs[1], ro.Secret)
	if isErr, text, _ := tool(t, reader, "read_file", map[string]any{"sandbox": dev, "path": "far.txt"}); isErr {
		t.Errorf("read_file with a read-only token through r2: %s", text)
	}
	if isErr, text, _ := tool(t, reader, "write_file", map[string]any{"sandbox": dev, "path": "ro.txt", "content": "x"}); !isErr || !strings.Contains(text, "write") {
		t.Errorf("write_file with a read-only token through r2: %v %s, want refused for lacking scope write", isErr, text)
	}

	// r1 dead: its sandbox's tools through r2 fail at once, naming r1.
	rs[0].kill()
	began := time.Now()
	isErr, text, _ = tool(t, far, "read_file", map[string]any{"sandbox": dev, "path": "far.txt"})
	if !isErr || !strings.Contains(text, "r1") {
		t.Errorf("read_file on a dead replica's sandbox: %v %q, want an error naming r1", isErr, text)
	}
	if d := time.Since(began); d > time.Minute {
		t.Errorf("a dead replica's sandbox took %s to answer", d.Round(time.Second))
	}
}
