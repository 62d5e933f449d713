package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/cli"
	pmcp "github.com/paddockhq/paddock/internal/mcp"
	"github.com/paddockhq/paddock/internal/servertest"
)

// The test binary is also the paddock CLI when asked: the stdio transport runs
// `paddock mcp` as the agent host would, a subprocess on pipes.
func TestMain(m *testing.M) {
	if os.Getenv("PADDOCK_TEST_RUN_CLI") == "1" {
		os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

var wantTools = []string{
	"app_status", "checkpoint", "create_sandbox", "delete_sandbox", "edit_file", "history",
	"list_files", "list_sandboxes", "move_file", "read_file", "redo", "remove_file",
	"restart_sandbox", "restore", "run_command", "stop_sandbox", "undo", "write_file",
}

// bearer adds an API token to each request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// progress collects the progress notifications a client received.
type progress struct {
	mu   sync.Mutex
	msgs []string
}

func (p *progress) handler(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.msgs = append(p.msgs, req.Params.Message)
}

func (p *progress) all() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.msgs, "")
}

func connectHTTP(t testing.TB, e *servertest.Env, token string, p *progress) (*sdk.ClientSession, error) {
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, &sdk.ClientOptions{ProgressNotificationHandler: p.handler})
	hc := &http.Client{Transport: bearer{token, http.DefaultTransport}}
	return c.Connect(t.Context(), &sdk.StreamableClientTransport{Endpoint: e.URL + "/mcp", HTTPClient: hc}, nil)
}

func connectStdio(t testing.TB, e *servertest.Env, token string, p *progress) (*sdk.ClientSession, error) {
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, &sdk.ClientOptions{ProgressNotificationHandler: p.handler})
	cmd := exec.Command(os.Args[0], "mcp")
	cmd.Env = append(os.Environ(), "PADDOCK_TEST_RUN_CLI=1", "PADDOCK_SERVER="+e.URL, "PADDOCK_TOKEN="+token,
		"XDG_CONFIG_HOME="+t.TempDir())
	cmd.Stderr = testWriter{t}
	return c.Connect(t.Context(), &sdk.CommandTransport{Command: cmd}, nil)
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("paddock mcp: %s", strings.TrimSpace(string(p)))
	return len(p), nil
}

// call calls tool name and returns its result and its text.
func call(t *testing.T, cs *sdk.ClientSession, name string, args any) (*sdk.CallToolResult, string) {
	t.Helper()
	params := &sdk.CallToolParams{Name: name, Arguments: args}
	params.SetProgressToken("p-" + name)
	res, err := cs.CallTool(t.Context(), params)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	return res, text.String()
}

// ok calls a tool that must succeed and decodes its structured result into out.
func ok(t *testing.T, cs *sdk.ClientSession, name string, args, out any) string {
	t.Helper()
	res, text := call(t, cs, name, args)
	if res.IsError {
		t.Fatalf("%s(%v): error %s", name, args, text)
	}
	if out != nil {
		data, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s: structured content %s: %v", name, data, err)
		}
	}
	return text
}

// fails calls a tool that must fail, with a text that says each of says.
func fails(t *testing.T, cs *sdk.ClientSession, name string, args any, says ...string) string {
	t.Helper()
	res, text := call(t, cs, name, args)
	if !res.IsError {
		t.Fatalf("%s(%v): want an error result, got %s", name, args, text)
	}
	for _, s := range says {
		if !strings.Contains(text, s) {
			t.Errorf("%s(%v): error %q does not say %q", name, args, text, s)
		}
	}
	return text
}

// Every tool over both transports, by the official SDK's client, against a real server.
func TestToolsOverBothTransports(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	for _, tr := range []struct {
		name    string
		connect func(testing.TB, *servertest.Env, string, *progress) (*sdk.ClientSession, error)
	}{{"http", connectHTTP}, {"stdio", connectStdio}} {
		t.Run(tr.name, func(t *testing.T) {
			p := &progress{}
			cs, err := tr.connect(t, e, alice.Token, p)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			exercise(t, e, alice, cs, p)
		})
	}
	// Each tool call, over either transport, was an event of alice's (stdio's are all
	// recorded once its session closed: paddock mcp records them before it exits).
	by := map[any]int{}
	for _, ev := range toolCalls(t, alice) {
		by[ev.Detail["transport"]]++
	}
	for _, tr := range []string{"http", "stdio"} {
		if by[tr] < len(wantTools) {
			t.Errorf("%d mcp.tool_call events over %s, want one per tool call (at least %d)", by[tr], tr, len(wantTools))
		}
	}
}

func exercise(t *testing.T, e *servertest.Env, alice *servertest.Client, cs *sdk.ClientSession, p *progress) {
	ctx := t.Context()
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
		if len(tool.Description) < 30 || tool.InputSchema == nil {
			t.Errorf("tool %s: description %q, schema %v", tool.Name, tool.Description, tool.InputSchema)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, wantTools) {
		t.Fatalf("tools %v, want %v", names, wantTools)
	}

	var created struct{ Sandbox api.Sandbox }
	ok(t, cs, "create_sandbox", map[string]any{"memory": "256M"}, &created)
	id := created.Sandbox.ID
	if id == "" || created.Sandbox.State != api.StateRunning {
		t.Fatalf("create_sandbox: %+v", created.Sandbox)
	}
	var list struct{ Sandboxes []api.Sandbox }
	ok(t, cs, "list_sandboxes", map[string]any{}, &list)
	if !slices.ContainsFunc(list.Sandboxes, func(s api.Sandbox) bool { return s.ID == id }) {
		t.Errorf("list_sandboxes: %s not in %+v", id, list.Sandboxes)
	}

	// Files.
	ok(t, cs, "write_file", map[string]any{"sandbox": id, "path": "src/a.txt", "content": "one two two\n"}, nil)
	var read struct {
		Content   string
		Truncated bool
	}
	ok(t, cs, "read_file", map[string]any{"sandbox": id, "path": "src/a.txt"}, &read)
	if read.Content != "one two two\n" || read.Truncated {
		t.Errorf("read_file: %+v", read)
	}
	fails(t, cs, "edit_file", map[string]any{"sandbox": id, "path": "src/a.txt", "old_string": "three", "new_string": "3"}, "does not occur")
	fails(t, cs, "edit_file", map[string]any{"sandbox": id, "path": "src/a.txt", "old_string": "two", "new_string": "2"}, "occurs 2 times", "replace_all")
	ok(t, cs, "edit_file", map[string]any{"sandbox": id, "path": "src/a.txt", "old_string": "one", "new_string": "1"}, nil)
	var edited struct{ Replacements int }
	ok(t, cs, "edit_file", map[string]any{"sandbox": id, "path": "src/a.txt", "old_string": "two", "new_string": "2", "replace_all": true}, &edited)
	ok(t, cs, "read_file", map[string]any{"sandbox": id, "path": "src/a.txt"}, &read)
	if read.Content != "1 2 2\n" || edited.Replacements != 2 {
		t.Errorf("after edits: %q, %d replacements", read.Content, edited.Replacements)
	}
	ok(t, cs, "read_file", map[string]any{"sandbox": id, "path": "src/a.txt", "max_bytes": 2}, &read)
	if read.Content != "1 " || !read.Truncated {
		t.Errorf("read_file max_bytes 2: %+v", read)
	}
	var files struct{ Entries []api.FileInfo }
	ok(t, cs, "list_files", map[string]any{"sandbox": id, "path": "src"}, &files)
	if len(files.Entries) != 1 || files.Entries[0].Name != "a.txt" {
		t.Errorf("list_files: %+v", files.Entries)
	}
	ok(t, cs, "move_file", map[string]any{"sandbox": id, "from": "src/a.txt", "to": "src/b.txt"}, nil)
	fails(t, cs, "read_file", map[string]any{"sandbox": id, "path": "src/a.txt"}, "not found")
	res, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "paddock://sandboxes/" + id + "/files/src/b.txt"})
	if err != nil || len(res.Contents) != 1 || res.Contents[0].Text != "1 2 2\n" {
		t.Errorf("resource src/b.txt: %+v, %v", res, err)
	}
	templates, err := cs.ListResourceTemplates(ctx, nil)
	if err != nil || len(templates.ResourceTemplates) != 1 {
		t.Errorf("resource templates: %+v, %v", templates, err)
	}

	// Commands: output streamed as progress, the exit status, the limit met, bounded output.
	var run struct {
		ExitCode int    `json:"exit_code"`
		Limit    string `json:"limit"`
		Stdout   string `json:"stdout"`
		Omitted  int64  `json:"stdout_omitted_bytes"`
	}
	ok(t, cs, "run_command", map[string]any{"sandbox": id, "argv": []string{"sh", "-c", "cat src/b.txt; echo streamed-out; exit 3"}}, &run)
	if run.ExitCode != 3 || !strings.Contains(run.Stdout, "streamed-out") {
		t.Errorf("run_command: %+v", run)
	}
	// The client handles notifications apart from responses: the last may be handled
	// after the call returned.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(p.all(), "streamed-out"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("no progress notification carried the output; got %q", p.all())
			break
		}
	}
	text := ok(t, cs, "run_command", map[string]any{"sandbox": id, "argv": []string{"cat"}, "stdin": "from stdin"}, &run)
	if run.Stdout != "from stdin" {
		t.Errorf("run_command with stdin: %s", text)
	}
	text = ok(t, cs, "run_command", map[string]any{"sandbox": id, "argv": []string{"sh", "-c", "head -c 100000 /dev/zero | tr '\\0' a"}}, &run)
	if run.Omitted != 100000-16<<10 || len(run.Stdout) != 16<<10 || !strings.Contains(text, "output cut") {
		t.Errorf("long output: omitted %d, kept %d, text %.200q", run.Omitted, len(run.Stdout), text)
	}
	fails(t, cs, "run_command", map[string]any{"sandbox": id, "argv": []string{"sleep", "300"}, "timeout_seconds": 1}, "limit: timeout")
	// An edit keeps the file's mode: a script stays executable.
	ok(t, cs, "write_file", map[string]any{"sandbox": id, "path": "run.sh", "content": "#!/bin/sh\necho before\n"}, nil)
	ok(t, cs, "run_command", map[string]any{"sandbox": id, "argv": []string{"chmod", "750", "run.sh"}}, nil)
	ok(t, cs, "edit_file", map[string]any{"sandbox": id, "path": "run.sh", "old_string": "before", "new_string": "after"}, nil)
	ok(t, cs, "run_command", map[string]any{"sandbox": id, "argv": []string{"./run.sh"}}, &run)
	if run.ExitCode != 0 || run.Stdout != "after\n" {
		t.Errorf("the edited script: %+v", run)
	}
	ok(t, cs, "remove_file", map[string]any{"sandbox": id, "path": "run.sh"}, nil)

	// History.
	var cp api.CheckpointResult
	ok(t, cs, "checkpoint", map[string]any{"sandbox": id, "message": "before removal"}, &cp)
	if text := fails(t, cs, "remove_file", map[string]any{"sandbox": id, "path": "src"}, "not empty", "set recursive"); strings.Contains(text, "restart_sandbox") {
		t.Errorf("remove_file of a directory that is not empty: %s", text)
	}
	ok(t, cs, "remove_file", map[string]any{"sandbox": id, "path": "src", "recursive": true}, nil)
	var hist struct {
		Current     string
		Checkpoints []api.Checkpoint
	}
	ok(t, cs, "history", map[string]any{"sandbox": id, "limit": 2}, &hist)
	if len(hist.Checkpoints) != 2 {
		t.Errorf("history limit 2: %+v", hist)
	}
	ok(t, cs, "undo", map[string]any{"sandbox": id}, nil)
	ok(t, cs, "read_file", map[string]any{"sandbox": id, "path": "src/b.txt"}, &read)
	ok(t, cs, "redo", map[string]any{"sandbox": id}, nil)
	fails(t, cs, "read_file", map[string]any{"sandbox": id, "path": "src/b.txt"}, "not found")
	ok(t, cs, "restore", map[string]any{"sandbox": id, "checkpoint": cp.Checkpoint.ID}, nil)
	ok(t, cs, "read_file", map[string]any{"sandbox": id, "path": "src/b.txt"}, &read)
	if read.Content != "1 2 2\n" {
		t.Errorf("after restore: %q", read.Content)
	}
	fails(t, cs, "restore", map[string]any{"sandbox": id, "checkpoint": "nope"}, "nope")

	// Bad input: outside the schema (naming the argument), unknown sandbox.
	fails(t, cs, "run_command", map[string]any{"sandbox": id, "argv": "ls"}, "argv")
	fails(t, cs, "run_command", map[string]any{"sandbox": id, "argv": []string{}}, "validating", "argv")
	fails(t, cs, "run_command", map[string]any{"sandbox": id, "argv": []string{"true"}, "shell": true}, "shell")
	fails(t, cs, "read_file", map[string]any{"sandbox": id}, "path")
	fails(t, cs, "read_file", map[string]any{"sandbox": id, "path": "x", "max_bytes": 1 << 30}, "max_bytes")
	fails(t, cs, "run_command", map[string]any{"sandbox": "sb-aaaaaaaaaa", "argv": []string{"true"}}, "not found", "list_sandboxes")

	// A denied command names the policy's rule.
	pol := "shell:\n  deny:\n    - \"touch /workspace/pwned\"\n"
	req, _ := http.NewRequest("PUT", e.URL+"/api/v1/sandboxes/"+id+"/policy", strings.NewReader(pol))
	req.Header.Set("Authorization", "Bearer "+alice.Token)
	req.Header.Set("Content-Type", "application/yaml")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	servertest.Decode(t, resp, http.StatusOK, nil)
	fails(t, cs, "run_command", map[string]any{"sandbox": id, "argv": []string{"touch", "/workspace/pwned"}}, "shell.deny[0]", "permission denied")
	servertest.Decode(t, alice.DoToken("DELETE", "/api/v1/sandboxes/"+id+"/policy", nil), http.StatusNoContent, nil)

	var app struct{ App api.AppStatus }
	if res, text := call(t, cs, "app_status", map[string]any{"sandbox": id}); res.IsError {
		// A sandbox without an app says so precisely.
		if !strings.Contains(text, "app") {
			t.Errorf("app_status: %s", text)
		}
	} else {
		data, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(data, &app)
		if app.App.State == "" {
			t.Errorf("app_status: %s", text)
		}
	}
	var sb struct{ Sandbox api.Sandbox }
	ok(t, cs, "stop_sandbox", map[string]any{"sandbox": id}, &sb)
	if sb.Sandbox.State != api.StateStopped {
		t.Errorf("stop_sandbox: %+v", sb.Sandbox)
	}
	fails(t, cs, "run_command", map[string]any{"sandbox": id, "argv": []string{"true"}}, "restart_sandbox")
	ok(t, cs, "restart_sandbox", map[string]any{"sandbox": id}, &sb)
	if sb.Sandbox.State != api.StateRunning {
		t.Errorf("restart_sandbox: %+v", sb.Sandbox)
	}
	ok(t, cs, "delete_sandbox", map[string]any{"sandbox": id}, nil)
	fails(t, cs, "list_files", map[string]any{"sandbox": id}, "not found")
}

// Bad input over both transports, each a precise error result the model can act on:
// arguments outside the schema name the argument and what is wrong with it, a sandbox
// argument that is no sandbox's ID or no sandbox of the caller's says so, and a command
// over one of the sandbox's limits names the limit. (A denied command naming the
// policy's rule: TestToolsOverBothTransports; an expired token: TestTokens.)
func TestBadInput(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	alice.MustJSON("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Limits: api.Limits{Pids: 64}}, http.StatusCreated, &sb)
	id := sb.ID
	cases := []struct {
		tool string
		args any
		says []string
	}{
		{"run_command", map[string]any{"sandbox": "sb-aaaaaaaaaa", "argv": []string{"true"}}, []string{"sb-aaaaaaaaaa", "not found", "list_sandboxes"}},
		{"run_command", map[string]any{"sandbox": "", "argv": []string{"true"}}, []string{`argument "sandbox": "" is not a sandbox ID`, "invalid argument"}},
		{"read_file", map[string]any{"sandbox": "../../etc", "path": "passwd"}, []string{`argument "sandbox": "../../etc" is not a sandbox ID`}},
		{"run_command", map[string]any{"sandbox": 5, "argv": []string{"true"}}, []string{`argument "sandbox": a value of type integer, want "string"`}},
		{"run_command", map[string]any{"argv": []string{"true"}}, []string{`missing required argument "sandbox"`}},
		{"run_command", map[string]any{"sandbox": id, "argv": "ls"}, []string{`argument "argv": a value of type string, want "array"`}},
		{"run_command", map[string]any{"sandbox": id, "argv": []any{"ls", 3}}, []string{`argument "argv": an item: a value of type integer, want "string"`}},
		{"run_command", map[string]any{"sandbox": id, "argv": []string{}}, []string{`argument "argv": 0 items, want at least 1`}},
		{"run_command", map[string]any{"sandbox": id, "argv": []string{"true"}, "shell": true}, []string{`unknown argument "shell"`, "run_command takes sandbox, argv, cwd, env, stdin, timeout_seconds"}},
		{"run_command", map[string]any{"sandbox": id, "argv": []string{"true"}, "timeout_seconds": 9999}, []string{`argument "timeout_seconds": 9999 is more than its maximum, 600`}},
		{"run_command", map[string]any{"sandbox": id, "argv": []string{"true"}, "env": []string{"NOEQUALS"}}, []string{"env", "NAME=VALUE", "invalid argument"}},
		{"run_command", "not an object", []string{"not a JSON object", "run_command takes sandbox"}},
		{"read_file", map[string]any{"sandbox": id, "path": ""}, []string{`argument "path": 0 characters, want at least 1`}},
		{"read_file", map[string]any{"sandbox": id, "path": "../../etc/passwd"}, []string{"leaves the workspace", "invalid argument"}},
		{"history", map[string]any{"sandbox": id, "limit": 1000}, []string{`argument "limit": 1000 is more than its maximum, 200`}},
		{"list_sandboxes", map[string]any{"all": true}, []string{`unknown argument "all"`, "list_sandboxes takes no arguments"}},
		{"create_sandbox", map[string]any{"memory": "lots"}, []string{"memory", `"lots" is not a size`}},
		{"run_command", map[string]any{"sandbox": id, "argv": []string{"sh", "-c", "for i in $(seq 200); do sleep 30 & done; wait"}, "timeout_seconds": 120},
			[]string{"limit: pids", "process limit (64)"}},
	}
	for name, connect := range map[string]func(testing.TB, *servertest.Env, string, *progress) (*sdk.ClientSession, error){"http": connectHTTP, "stdio": connectStdio} {
		t.Run(name, func(t *testing.T) {
			cs, err := connect(t, e, alice.Token, &progress{})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			for _, c := range cases {
				fails(t, cs, c.tool, c.args, c.says...)
			}
			// The session goes on after them all.
			ok(t, cs, "run_command", map[string]any{"sandbox": id, "argv": []string{"pkill", "sleep"}}, nil)
		})
	}
}

// No tool returns a secret's value: a sandbox's extra environment is listed by name.
func TestSandboxEnvIsRedacted(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	alice.MustJSON("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Env: []string{"API_KEY=hunter2-secret"}}, http.StatusCreated, &sb)
	cs, err := connectHTTP(t, e, alice.Token, &progress{})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for tool, args := range map[string]any{"list_sandboxes": map[string]any{}, "restart_sandbox": map[string]any{"sandbox": sb.ID}} {
		text := ok(t, cs, tool, args, nil)
		if strings.Contains(text, "hunter2") || !strings.Contains(text, "API_KEY") {
			t.Errorf("%s: %s", tool, text)
		}
	}
}

// A missing, bad, expired or unscoped token (not even read) is refused before any MCP message is
// handled over HTTP; over stdio, where the CLI holds the token, each tool says so.
func TestTokens(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	if _, err := connectHTTP(t, e, "pdk_nope", &progress{}); err == nil || !strings.Contains(err.Error(), "Unauthorized") {
		t.Errorf("a bad token connects: %v", err)
	}
	var tokensOnly api.Token
	alice.MustJSON("POST", "/api/v1/tokens", api.CreateTokenRequest{Name: "tokens", Scopes: []string{"tokens"}}, http.StatusCreated, &tokensOnly)
	if _, err := connectHTTP(t, e, tokensOnly.Secret, &progress{}); err == nil {
		t.Error("a token without scope read connects")
	}
	var short api.Token
	alice.MustJSON("POST", "/api/v1/tokens", api.CreateTokenRequest{Name: "short", ExpiresIn: "1s"}, http.StatusCreated, &short)
	stdio, err := connectStdio(t, e, short.Secret, &progress{})
	if err != nil {
		t.Fatal(err)
	}
	defer stdio.Close()
	// Wait for the token to expire, as the API sees it.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		req, _ := http.NewRequest("GET", e.URL+"/api/v1/me", nil)
		req.Header.Set("Authorization", "Bearer "+short.Secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the token did not expire")
		}
	}
	fails(t, stdio, "list_sandboxes", map[string]any{}, "unauthenticated", "paddock login")
	if _, err := connectHTTP(t, e, short.Secret, &progress{}); err == nil {
		t.Error("an expired token connects")
	}
	// An MCP client shows the challenge, a person the body: each says the token expired.
	req, _ := http.NewRequest("POST", e.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	req.Header.Set("Authorization", "Bearer "+short.Secret)
	req.Header.Set("Content-Type", "application/json")
	expired, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := expired.Header.Get("WWW-Authenticate"); !strings.Contains(got, `error="invalid_token"`) || !strings.Contains(got, "expired at") || strings.Contains(got, short.Secret) {
		t.Errorf("expired token: WWW-Authenticate %q", got)
	}
	if got := servertest.ErrorOf(t, expired, http.StatusUnauthorized); !strings.Contains(got.Message, "expired at") || !strings.Contains(got.Message, "paddock login") {
		t.Errorf("expired token: %q", got.Message)
	}
	resp, err := http.Post(e.URL+"/mcp", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := servertest.ErrorOf(t, resp, http.StatusUnauthorized); !strings.Contains(got.Message, "API token") {
		t.Errorf("no token: %q", got.Message)
	}
}

// A read-only API token over HTTP gets the tools that only read, and they work; a tool
// that changes things is an error result naming the scope it lacks, changes nothing, and
// is recorded.
func TestReadOnlyToken(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	alice.MustJSON("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{}, http.StatusCreated, &sb)
	writer, err := connectHTTP(t, e, alice.Token, &progress{})
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	ok(t, writer, "write_file", map[string]any{"sandbox": sb.ID, "path": "notes.txt", "content": "kept\n"}, nil)

	var read api.Token
	alice.MustJSON("POST", "/api/v1/tokens", api.CreateTokenRequest{Name: "read", Scopes: []string{"read"}}, http.StatusCreated, &read)
	cs, err := connectHTTP(t, e, read.Secret, &progress{})
	if err != nil {
		t.Fatalf("a read-only token connects: %v", err)
	}
	defer cs.Close()
	var names []string
	for tool, err := range cs.Tools(t.Context(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	if want := []string{"app_status", "history", "list_files", "list_sandboxes", "read_file"}; !slices.Equal(names, want) {
		t.Errorf("a read-only token's tools: %v, want %v", names, want)
	}
	if init := cs.InitializeResult(); init == nil || !strings.Contains(init.Instructions, "scope write") {
		t.Errorf("instructions do not say the credentials only read: %+v", init)
	}

	var list struct{ Sandboxes []api.Sandbox }
	ok(t, cs, "list_sandboxes", map[string]any{}, &list)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].ID != sb.ID {
		t.Errorf("list_sandboxes: %+v", list.Sandboxes)
	}
	var file struct{ Content string }
	ok(t, cs, "read_file", map[string]any{"sandbox": sb.ID, "path": "notes.txt"}, &file)
	if file.Content != "kept\n" {
		t.Errorf("read_file: %q", file.Content)
	}
	ok(t, cs, "list_files", map[string]any{"sandbox": sb.ID}, nil)
	var hist struct{ Checkpoints []api.Checkpoint }
	ok(t, cs, "history", map[string]any{"sandbox": sb.ID}, &hist)
	if len(hist.Checkpoints) == 0 {
		t.Error("history: no checkpoints after a write")
	}
	if res, text := call(t, cs, "app_status", map[string]any{"sandbox": sb.ID}); res.IsError && strings.Contains(text, "scope") {
		t.Errorf("app_status refused for scope: %s", text)
	}
	res, err := cs.ReadResource(t.Context(), &sdk.ReadResourceParams{URI: "paddock://sandboxes/" + sb.ID + "/files/notes.txt"})
	if err != nil || len(res.Contents) != 1 || res.Contents[0].Text != "kept\n" {
		t.Errorf("resource notes.txt: %+v, %v", res, err)
	}

	for tool, args := range map[string]any{
		"write_file":     map[string]any{"sandbox": sb.ID, "path": "notes.txt", "content": "overwritten\n"},
		"run_command":    map[string]any{"sandbox": sb.ID, "argv": []string{"rm", "notes.txt"}},
		"delete_sandbox": map[string]any{"sandbox": sb.ID},
		"create_sandbox": map[string]any{},
	} {
		fails(t, cs, tool, args, `lacks scope "write"`, "the MCP tool "+tool, "permission denied")
	}
	ok(t, writer, "read_file", map[string]any{"sandbox": sb.ID, "path": "notes.txt"}, &file)
	if file.Content != "kept\n" {
		t.Errorf("a read-only token changed notes.txt: %q", file.Content)
	}
	ok(t, writer, "list_sandboxes", map[string]any{}, &list)
	if len(list.Sandboxes) != 1 {
		t.Errorf("sandboxes after the refused calls: %+v", list.Sandboxes)
	}
	// Over stdio the CLI asks the server what its token may do and, like /mcp, serves
	// only the tools that read, refusing the others by the scope they need.
	stdio, err := connectStdio(t, e, read.Secret, &progress{})
	if err != nil {
		t.Fatal(err)
	}
	defer stdio.Close()
	names = nil
	for tool, err := range stdio.Tools(t.Context(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	if want := []string{"app_status", "history", "list_files", "list_sandboxes", "read_file"}; !slices.Equal(names, want) {
		t.Errorf("a read-only token's tools over stdio: %v, want %v", names, want)
	}
	ok(t, stdio, "read_file", map[string]any{"sandbox": sb.ID, "path": "notes.txt"}, &file)
	fails(t, stdio, "write_file", map[string]any{"sandbox": sb.ID, "path": "notes.txt", "content": "overwritten\n"}, `lacks scope "write"`, "the MCP tool write_file", "permission denied")

	// Each refusal over HTTP is an event naming the token and the scope.
	var events api.EventList
	alice.MustJSON("GET", "/api/v1/events?action=auth.token.scope_denied&limit=50", nil, http.StatusOK, &events)
	denied := 0
	for _, ev := range events.Events {
		if ev.Detail["token_id"] == read.ID && ev.Detail["scope"] == "write" && strings.HasPrefix(fmt.Sprint(ev.Detail["request"]), "the MCP tool ") {
			denied++
		}
	}
	if denied != 4 {
		t.Errorf("%d scope_denied events for the read-only token's tool calls, want 4: %+v", denied, events.Events)
	}
}

// A published third-party client, the TypeScript MCP SDK's (tests/mcp, pinned by its
// lockfile), run by Node over both transports: it lists the tools, calls each, and
// reads a file resource; each result and each error says what it should.
func TestTypeScriptClient(t *testing.T) {
	dir, err := filepath.Abs("../../tests/mcp")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		t.Fatalf("%s/node_modules lacks @modelcontextprotocol/sdk: run make setup", dir)
	}
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	for name, cfg := range map[string]map[string]any{
		"http": {"transport": "http", "url": e.URL + "/mcp", "token": alice.Token},
		"stdio": {"transport": "stdio", "command": os.Args[0], "args": []string{"mcp"}, "env": map[string]string{
			"PADDOCK_TEST_RUN_CLI": "1", "PADDOCK_SERVER": e.URL, "PADDOCK_TOKEN": alice.Token, "XDG_CONFIG_HOME": t.TempDir()}},
	} {
		t.Run(name, func(t *testing.T) {
			arg, _ := json.Marshal(cfg)
			cmd := exec.CommandContext(t.Context(), "node", filepath.Join(dir, "client.mjs"), string(arg))
			cmd.Stderr = testWriter{t}
			stdout, err := cmd.Output()
			if err != nil {
				t.Fatalf("node client.mjs: %v", err)
			}
			var got struct {
				Server struct{ Name string }
				Tools  []struct {
					Name     string
					Required []string
				}
				Calls []struct {
					Name    string
					IsError bool
					Text    string
				}
				Progress []string
				Resource string
			}
			if err := json.Unmarshal(stdout, &got); err != nil {
				t.Fatalf("client.mjs wrote %.300q: %v", stdout, err)
			}
			if got.Server.Name != "paddock" || len(got.Tools) != len(wantTools) {
				t.Errorf("server %q, %d tools", got.Server.Name, len(got.Tools))
			}
			for _, tool := range got.Tools {
				if tool.Name == "run_command" && !slices.Equal(tool.Required, []string{"sandbox", "argv"}) {
					t.Errorf("run_command requires %v", tool.Required)
				}
			}
			want := []struct {
				name    string
				isError bool
				says    string
			}{
				{"create_sandbox", false, `"state":"running"`},
				{"list_sandboxes", false, `"id":"sb-`},
				{"write_file", false, "hello.txt"},
				{"edit_file", false, `"replacements":1`},
				{"read_file", false, "hello from the TypeScript SDK"},
				{"list_files", false, `"name":"hello.txt"`},
				{"run_command", false, "exit_code: 7"},
				{"checkpoint", false, `"created":`},
				{"move_file", false, "greeting.txt"},
				{"history", false, `"checkpoints"`},
				{"undo", false, `"checkpoint"`},
				{"redo", false, `"checkpoint"`},
				{"remove_file", false, "removed greeting.txt"},
				{"restore", false, `"checkpoint"`},
				{"app_status", false, `"state"`},
				{"stop_sandbox", false, `"state":"stopped"`},
				{"run_command", true, "restart_sandbox"},
				{"restart_sandbox", false, `"state":"running"`},
				{"edit_file", true, "does not occur"},
				{"run_command", true, "argv"},
				{"list_files", true, "not found"},
				{"delete_sandbox", false, "deleted"},
			}
			if len(got.Calls) != len(want) {
				t.Fatalf("%d calls, want %d: %+v", len(got.Calls), len(want), got.Calls)
			}
			called := map[string]bool{}
			for i, w := range want {
				c := got.Calls[i]
				called[c.Name] = true
				if c.Name == "app_status" && c.IsError && strings.Contains(c.Text, "app") {
					continue // a sandbox without an app says so
				}
				if c.Name != w.name || c.IsError != w.isError || !strings.Contains(c.Text, w.says) {
					t.Errorf("call %d: %s isError=%v %q; want %s isError=%v saying %q", i, c.Name, c.IsError, c.Text, w.name, w.isError, w.says)
				}
			}
			for _, tool := range wantTools {
				if !called[tool] {
					t.Errorf("the client did not call %s", tool)
				}
			}
			// Over stdio this client handles a notification a microtask after the message,
			// a response at once: a progress notification read in the same chunk as its
			// call's response comes after the call ended, and is dropped by the client. The
			// Go client checks progress over stdio (TestToolsOverBothTransports).
			if name == "http" && !strings.Contains(strings.Join(got.Progress, ""), "hello from the TypeScript SDK") {
				t.Errorf("progress: %q", got.Progress)
			}
			if got.Resource != "hello from the TypeScript SDK\n" {
				t.Errorf("resource: %q", got.Resource)
			}
		})
	}
}

// Over HTTP each request acts as its own token's user: bob neither sees nor reaches
// alice's sandbox, though both talk to the same endpoint.
func TestCallersApart(t *testing.T) {
	e := servertest.Start(t)
	alice, bob := e.Register(t, "alice"), e.Register(t, "bob")
	var sb api.Sandbox
	alice.MustJSON("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{}, http.StatusCreated, &sb)
	as, err := connectHTTP(t, e, alice.Token, &progress{})
	if err != nil {
		t.Fatal(err)
	}
	defer as.Close()
	bs, err := connectHTTP(t, e, bob.Token, &progress{})
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	var list struct{ Sandboxes []api.Sandbox }
	ok(t, as, "list_sandboxes", map[string]any{}, &list)
	if len(list.Sandboxes) != 1 {
		t.Errorf("alice's sandboxes: %+v", list.Sandboxes)
	}
	ok(t, bs, "list_sandboxes", map[string]any{}, &list)
	if len(list.Sandboxes) != 0 {
		t.Errorf("bob sees %+v", list.Sandboxes)
	}
	fails(t, bs, "run_command", map[string]any{"sandbox": sb.ID, "argv": []string{"true"}}, "not found")
	ok(t, as, "run_command", map[string]any{"sandbox": sb.ID, "argv": []string{"true"}}, nil)
}

// A command that meets one of the sandbox's limits is an error result naming the limit,
// over both transports.
func TestLimitHit(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	alice.MustJSON("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Limits: api.Limits{FileSize: "1M"}}, http.StatusCreated, &sb)
	for name, connect := range map[string]func(testing.TB, *servertest.Env, string, *progress) (*sdk.ClientSession, error){"http": connectHTTP, "stdio": connectStdio} {
		t.Run(name, func(t *testing.T) {
			cs, err := connect(t, e, alice.Token, &progress{})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			fails(t, cs, "run_command", map[string]any{"sandbox": sb.ID, "argv": []string{"dd", "if=/dev/zero", "of=big", "bs=1M", "count=2"}}, "limit: file_size")
		})
	}
	// GET is not how MCP is reached here: the endpoint is stateless.
	req, _ := http.NewRequest("GET", e.URL+"/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+alice.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /mcp: %s", resp.Status)
	}
}

// BenchmarkRunTrue is run_command(["true"]) through MCP, over each transport, beside the
// same command through the Go client's one-shot exec.
func BenchmarkRunTrue(b *testing.B) {
	e := servertest.Start(b)
	alice := e.Register(b, "alice")
	var sb api.Sandbox
	alice.MustJSON("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{}, http.StatusCreated, &sb)
	b.Run("client-exec", func(b *testing.B) {
		s := paddock.New(e.URL, paddock.WithToken(alice.Token)).Sandbox(sb.ID)
		for b.Loop() {
			if res, err := s.Exec(b.Context(), []string{"true"}); err != nil || res.ExitCode != 0 {
				b.Fatal(res, err)
			}
		}
	})
	for name, connect := range map[string]func(testing.TB, *servertest.Env, string, *progress) (*sdk.ClientSession, error){"mcp-http": connectHTTP, "mcp-stdio": connectStdio} {
		b.Run(name, func(b *testing.B) {
			cs, err := connect(b, e, alice.Token, &progress{})
			if err != nil {
				b.Fatal(err)
			}
			defer cs.Close()
			for b.Loop() {
				res, err := cs.CallTool(b.Context(), &sdk.CallToolParams{Name: "run_command", Arguments: map[string]any{"sandbox": sb.ID, "argv": []string{"true"}}})
				if err != nil || res.IsError {
					b.Fatal(res, err)
				}
			}
		})
	}
}

// A tool call over stdio is an event of the token's user, recorded by the server through
// POST /api/v1/events/mcp; a read-only token may record it. The body names no one: a
// sandbox of another user's is 404 and records nothing, and a body the server cannot
// take is a 400 naming the field.
func TestStdioToolCallsAreEvents(t *testing.T) {
	if !slices.Equal(pmcp.ToolNames(), wantTools) {
		t.Errorf("ToolNames %v, want %v", pmcp.ToolNames(), wantTools)
	}
	e := servertest.Start(t)
	alice, bob := e.Register(t, "alice"), e.Register(t, "bob")
	var sb, bobs api.Sandbox
	alice.MustJSON("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{}, http.StatusCreated, &sb)
	bob.MustJSON("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{}, http.StatusCreated, &bobs)
	var read api.Token
	alice.MustJSON("POST", "/api/v1/tokens", api.CreateTokenRequest{Name: "read", Scopes: []string{"read"}}, http.StatusCreated, &read)
	cs, err := connectStdio(t, e, read.Secret, &progress{})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ok(t, cs, "list_files", map[string]any{"sandbox": sb.ID}, nil)
	fails(t, cs, "write_file", map[string]any{"sandbox": sb.ID, "path": "a.txt", "content": "x"}, "scope write")

	// paddock mcp records a call after its result, and all of them before it exits.
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	got := toolCalls(t, alice)
	want := []map[string]any{
		{"tool": "write_file", "sandbox": sb.ID, "error": api.CodePermissionDenied, "transport": "stdio"},
		{"tool": "list_files", "sandbox": sb.ID, "transport": "stdio"},
	}
	if len(got) != len(want) {
		t.Fatalf("mcp.tool_call events %+v, want %v", got, want)
	}
	for i, w := range want {
		if ev := got[i]; ev.Actor != alice.User.ID || !maps.Equal(ev.Detail, w) {
			t.Errorf("event %d: %+v, want actor %s, detail %v", i, ev, alice.User.ID, w)
		}
	}

	for _, c := range []struct {
		name, body string
		status     int
		says       string
	}{
		{"another user's sandbox", `{"tool":"read_file","sandbox":"` + bobs.ID + `"}`, http.StatusNotFound, bobs.ID},
		{"unknown tool", `{"tool":"format_disk"}`, http.StatusBadRequest, "field tool"},
		{"no tool", `{}`, http.StatusBadRequest, "field tool"},
		{"unknown error code", `{"tool":"read_file","error":"oops"}`, http.StatusBadRequest, "field error"},
		{"malformed sandbox", `{"tool":"read_file","sandbox":"../x"}`, http.StatusBadRequest, "field sandbox"},
		{"unknown field", `{"tool":"read_file","user":"bob"}`, http.StatusBadRequest, "user"},
		{"not JSON", `tool=read_file`, http.StatusBadRequest, "JSON"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if eb := servertest.ErrorOf(t, alice.DoToken("POST", "/api/v1/events/mcp", c.body), c.status); !strings.Contains(eb.Message, c.says) {
				t.Errorf("%s: %q does not say %q", c.body, eb.Message, c.says)
			}
		})
	}
	if after := toolCalls(t, alice); len(after) != len(got) {
		t.Errorf("refused bodies recorded events: %+v", after[:len(after)-len(got)])
	}
}

// toolCalls are alice's mcp.tool_call events, newest first.
func toolCalls(t *testing.T, alice *servertest.Client) []api.Event {
	t.Helper()
	var list api.EventList
	alice.MustJSON("GET", "/api/v1/events?action=mcp.tool_call&limit=1000", nil, http.StatusOK, &list)
	return list.Events
}
