package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/agent/coder"
	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/gateway"
	"github.com/paddockhq/paddock/internal/gateway/scripted"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/wire"
)

// events parses the harness's JSON lines.
func agentEvents(t *testing.T, out []byte) []coder.Event {
	t.Helper()
	var evs []coder.Event
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e coder.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("an event line is not JSON: %q", sc.Text())
		}
		evs = append(evs, e)
	}
	return evs
}

// The coding agent runs in a real sandbox as the sandbox user, against a scripted
// provider behind the real gateway: its turn edits a file, runs a command, reads the
// app's state, and lands on the timeline as one checkpoint named for it; the next turn's
// undo takes it back.
func TestAgentInSandbox(t *testing.T) {
	sc, err := scripted.Load("testdata/agent_session.json")
	if err != nil {
		t.Fatal(err)
	}
	provider := scripted.New(sc)
	up := httptest.NewServer(provider)
	defer up.Close()
	e := servertest.Start(t, func(c *server.Config) {
		c.Gateway = gateway.Config{AgentModel: "scripted-model",
			Providers: []gateway.Provider{{Name: "scripted", Kind: gateway.KindOpenAI, BaseURL: up.URL, APIKey: "sk-platform"}}}
	})
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work"}), http.StatusCreated, &sb)
	if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", `echo '<h1 style="color: red">Hi</h1>' > /workspace/index.html`}}); res.ExitCode != 0 {
		t.Fatalf("writing index.html: %+v", res)
	}

	code := func(msg string) []coder.Event {
		t.Helper()
		res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{wire.AgentPath, wire.CodeSubcommand, "--", msg}, TimeoutMS: 120_000})
		if res.ExitCode != 0 {
			t.Fatalf("paddock-agent code %q: exit %d\nstdout %s\nstderr %s\nscript: %v", msg, res.ExitCode, res.Stdout, res.Stderr, provider.Err())
		}
		return agentEvents(t, res.Stdout)
	}
	evs := code("make the header blue")
	if got := fileContent(t, alice, sb.ID, "index.html"); got != "<h1 style=\"color: blue\">Hi</h1>\n" {
		t.Errorf("index.html after the turn: %q", got)
	}
	var checkpoint, ran string
	for _, ev := range evs {
		switch {
		case ev.Type == coder.EvCheckpoint:
			checkpoint = ev.Checkpoint
		case ev.Type == coder.EvToolResult && ev.Tool == "run_command":
			ran = ev.Output
		case ev.Type == coder.EvError:
			t.Errorf("error event: %+v", ev)
		}
	}
	if !strings.Contains(ran, "exit status 0") || !strings.Contains(ran, "color: blue") || strings.Contains(ran, "\nroot\n") {
		t.Errorf("run_command, which must run as the sandbox user:\n%s", ran)
	}
	var h api.History
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+sb.ID+"/history", nil), http.StatusOK, &h)
	var turn *api.Checkpoint
	for i := range h.Checkpoints {
		if h.Checkpoints[i].ID == checkpoint {
			turn = &h.Checkpoints[i]
		}
	}
	if turn == nil || turn.Message != "agent turn 1: make the header blue" || h.Current != checkpoint {
		t.Fatalf("the turn's checkpoint %q is not on the timeline as the current one named for it: %+v", checkpoint, h)
	}

	// The conversation, and its events for the desktop, survive the sandbox's restart
	// (its /tmp starts empty): the host keeps them, and only them.
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/restart", nil), http.StatusOK, nil)
	hist := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{wire.AgentPath, wire.CodeSubcommand, "--history"}})
	if !strings.Contains(string(hist.Stdout), `"type":"turn","turn":1,"text":"make the header blue"`) || !strings.Contains(string(hist.Stdout), `"type":"checkpoint"`) {
		t.Errorf("the conversation's events after a restart:\n%s\n%s", hist.Stdout, hist.Stderr)
	}
	put := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c",
		`curl -s -o /dev/null -w '%{http_code} ' -X PUT --data x "$PADDOCK_SERVICES_URL/sandbox/v1/agent/state/other.json"; ` +
			`head -c 17000000 /dev/zero | curl -s -o /dev/null -w '%{http_code}' -X PUT --data-binary @- "$PADDOCK_SERVICES_URL/sandbox/v1/agent/state/events.jsonl"`}})
	if got := string(put.Stdout); got != "400 429" && got != "400 413" {
		t.Errorf("keeping a file other than the conversation's, and one over its bound: HTTP %q (%s)", got, put.Stderr)
	}

	code("take that back")
	if got := fileContent(t, alice, sb.ID, "index.html"); got != "<h1 style=\"color: red\">Hi</h1>\n" {
		t.Errorf("index.html after undo: %q", got)
	}
	if err := provider.Err(); err != nil || !provider.Done() {
		t.Errorf("the script: %v (done %v)", err, provider.Done())
	}
}

// The agent killed in the middle of a turn: the conversation survives, and --recover rolls
// the unfinished turn back, so the workspace is at the last checkpoint, and says so.
func TestAgentKilledInTurn(t *testing.T) {
	sc, err := scripted.Load("testdata/agent_killed.json")
	if err != nil {
		t.Fatal(err)
	}
	provider := scripted.New(sc)
	up := httptest.NewServer(provider)
	defer up.Close()
	e := servertest.Start(t, func(c *server.Config) {
		c.Gateway = gateway.Config{AgentModel: "m", Providers: []gateway.Provider{{Name: "p", Kind: gateway.KindOpenAI, BaseURL: up.URL, APIKey: "sk-platform"}}}
	})
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work"}), http.StatusCreated, &sb)
	execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo original > /workspace/index.html"}})

	// Kill the agent once its edit is done and it waits for the stalled model.
	script := wire.AgentPath + ` code -- "rewrite the page" > /tmp/ev 2>&1 & pid=$!
for i in $(seq 600); do grep -q '"type":"tool_result"' /tmp/ev && break; sleep 0.1; done
kill -9 $pid; wait $pid; cat /tmp/ev`
	res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", script}, TimeoutMS: 120_000})
	if !strings.Contains(string(res.Stdout), `"type":"tool_result"`) {
		t.Fatalf("the first turn did not get to its edit: %s %s", res.Stdout, res.Stderr)
	}
	if got := fileContent(t, alice, sb.ID, "index.html"); got != "half-done\n" {
		t.Fatalf("index.html while the turn was under way: %q", got)
	}

	// What the desktop runs once it sees a turn end without its done event: the
	// unfinished turn is rolled back at once, and an event of that turn says so.
	res = execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{wire.AgentPath, wire.CodeSubcommand, "--recover"}, TimeoutMS: 60_000})
	if res.ExitCode != 0 {
		t.Fatalf("--recover: exit %d\n%s\n%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	var recovered *coder.Event
	for _, ev := range agentEvents(t, res.Stdout) {
		if ev.Type == coder.EvRecovered {
			recovered = &ev
		}
	}
	if recovered == nil || recovered.Turn != 1 || !strings.Contains(recovered.Message, "rolled back") {
		t.Errorf("no recovered event of turn 1 in\n%s", res.Stdout)
	}
	if got := fileContent(t, alice, sb.ID, "index.html"); got != "original\n" {
		t.Errorf("index.html after the unfinished turn was recovered: %q, want the last checkpoint's", got)
	}

	res = execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{wire.AgentPath, wire.CodeSubcommand, "--", "what happened?"}, TimeoutMS: 120_000})
	if res.ExitCode != 0 {
		t.Fatalf("the next turn: exit %d\n%s\n%s\n%v", res.ExitCode, res.Stdout, res.Stderr, provider.Err())
	}
	// The conversation survived: the model saw the first turn, and the note.
	reqs := provider.Requests()
	last := reqs[len(reqs)-1]
	var text []string
	for _, m := range last.Messages {
		text = append(text, m.Role+": "+string(m.Content))
	}
	all := strings.Join(text, "\n")
	if !strings.Contains(all, "rewrite the page") || !strings.Contains(all, "its changes were rolled back") {
		t.Errorf("the model's view of the conversation:\n%s", all)
	}
	if err := provider.Err(); err != nil || !provider.Done() {
		t.Errorf("the script: %v (done %v)", err, provider.Done())
	}
}

// With only an Anthropic provider configured, the agent speaks Anthropic's Messages API
// to it through the gateway.
func TestAgentInSandboxAnthropic(t *testing.T) {
	sc, err := scripted.Parse([]byte(`{"steps": [
	  {"expect": {"model": "claude-scripted", "last_role": "user", "last_contains": ["make the header blue"]},
	   "respond": {"tool_calls": [{"name": "edit_file", "arguments": {"path": "index.html", "old_string": "red", "new_string": "blue"}}]}},
	  {"expect": {"last_role": "tool", "last_contains": ["edited index.html"]}, "respond": {"content": "Blue."}}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	provider := scripted.New(sc)
	up := httptest.NewServer(provider)
	defer up.Close()
	e := servertest.Start(t, func(c *server.Config) {
		c.Gateway = gateway.Config{AgentModel: "claude-scripted",
			Providers: []gateway.Provider{{Name: "claude", Kind: gateway.KindAnthropic, BaseURL: up.URL, APIKey: "sk-ant-platform"}}}
	})
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work"}), http.StatusCreated, &sb)
	execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo 'h1 { color: red }' > /workspace/index.html"}})
	res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{wire.AgentPath, wire.CodeSubcommand, "--", "make the header blue"}, TimeoutMS: 120_000})
	if res.ExitCode != 0 || !strings.Contains(string(res.Stdout), `"type":"answer","turn":1,"text":"Blue."`) {
		t.Fatalf("exit %d\n%s\n%s\n%v", res.ExitCode, res.Stdout, res.Stderr, provider.Err())
	}
	if got := fileContent(t, alice, sb.ID, "index.html"); got != "h1 { color: blue }\n" {
		t.Errorf("index.html: %q", got)
	}
	if reqs := provider.Requests(); len(reqs) != 2 || reqs[0].API != "anthropic" {
		t.Errorf("requests %+v", reqs)
	}
}

// The app crashing: the agent's app_status shows it crashed, how it ended and what it
// printed; the agent fixes the cause and restarts the app, which then runs.
func TestAgentSeesAppCrash(t *testing.T) {
	sc, err := scripted.Parse([]byte(`{"steps": [
	  {"expect": {"last_contains": ["why is the app down?"]}, "respond": {"tool_calls": [{"name": "app_status"}]}},
	  {"expect": {"last_role": "tool", "last_contains": ["state: backoff", "last exit: code 3", "config.json: No such file"]},
	   "respond": {"tool_calls": [{"name": "write_file", "arguments": {"path": "config.json", "content": "{}"}}, {"name": "restart_app"}]}},
	  {"expect": {"last_role": "tool", "last_contains": ["the app is restarting"]},
	   "respond": {"content": "config.json was missing; I wrote one and restarted the app."}},
	  {"expect": {"last_contains": ["restart it again"]}, "respond": {"tool_calls": [{"name": "restart_app"}]}},
	  {"expect": {"last_role": "tool", "last_contains": ["the app is restarting"]}, "respond": {"content": "Restarted."}}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	provider := scripted.New(sc)
	up := httptest.NewServer(provider)
	defer up.Close()
	e := servertest.Start(t, func(c *server.Config) {
		c.Gateway = gateway.Config{AgentModel: "m", Providers: []gateway.Provider{{Name: "p", Kind: gateway.KindOpenAI, BaseURL: up.URL, APIKey: "sk-platform"}}}
	})
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "broken",
		App: api.Template{Command: []string{"sh", "-c", "cat /workspace/config.json || exit 3; exec sleep 100000"}, Port: 8080}}), http.StatusCreated, &sb)
	appState := func(want string, restarts int) api.AppStatus {
		t.Helper()
		var st api.AppStatus
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			st = api.AppStatus{}
			servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+sb.ID+"/app", nil), http.StatusOK, &st)
			if st.State == want && (want != "backoff" || st.LastExit != nil) && st.Restarts >= restarts {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("the app never reached %s: %+v", want, st)
			}
		}
	}
	turn := func(msg string) {
		t.Helper()
		res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{wire.AgentPath, wire.CodeSubcommand, "--", msg}, TimeoutMS: 120_000})
		if res.ExitCode != 0 {
			t.Fatalf("exit %d\n%s\n%s\n%v", res.ExitCode, res.Stdout, res.Stderr, provider.Err())
		}
	}
	// Five restarts in, the app waits 3.2 s between runs that last a moment: the agent's
	// look at it then finds it in backoff, not in one of its brief runs.
	appState("backoff", 5)
	turn("why is the app down?")
	running := appState("running", 0)
	// A running app restarts only when told: the restart is the agent's.
	turn("restart it again")
	appState("running", running.Restarts+1)
	if err := provider.Err(); err != nil || !provider.Done() {
		t.Errorf("the script: %v", err)
	}
	var evs api.EventList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/events?action=sandbox.app_restart", nil), http.StatusOK, &evs)
	if len(evs.Events) != 2 || evs.Events[0].Detail["by"] != "agent" {
		t.Errorf("the restart's audit events: %+v", evs.Events)
	}
}

// The browser tool in a real sandbox: Chromium, run as the sandbox user, opens the
// sandbox's app on its own loopback and reads its text; a server on the host's loopback
// at the same kind of address is out of its reach.
func TestAgentBrowserInSandbox(t *testing.T) {
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("<p>the host's own page</p>"))
	}))
	defer host.Close()
	sc, err := scripted.Parse(fmt.Appendf(nil, `{"steps": [
	  {"expect": {"last_contains": ["look at the app"], "tools": ["browser"]},
	   "respond": {"tool_calls": [{"name": "browser", "arguments": {"action": "open", "url": "http://127.0.0.1:8080/"}}]}},
	  {"expect": {"last_role": "tool", "last_contains": ["title: The app", "Hello from the sandbox"]},
	   "respond": {"tool_calls": [{"name": "browser", "arguments": {"action": "open", "url": "%s/"}}]}},
	  {"expect": {"last_role": "tool", "last_contains": ["error: opening"]}, "respond": {"content": "The app says hello."}}
	]}`, host.URL))
	if err != nil {
		t.Fatal(err)
	}
	provider := scripted.New(sc)
	up := httptest.NewServer(provider)
	defer up.Close()
	e := servertest.Start(t, func(c *server.Config) {
		c.Gateway = gateway.Config{AgentModel: "m", Providers: []gateway.Provider{{Name: "p", Kind: gateway.KindOpenAI, BaseURL: up.URL, APIKey: "sk-platform"}}}
	})
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "site",
		App: api.Template{Command: []string{"/usr/bin/perl", "-e", crashingServer}, Port: 8080}}), http.StatusCreated, &sb)
	execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo '<title>The app</title><h1>Hello from the sandbox</h1>' > /workspace/index.html"}})
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var st api.AppStatus
		servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+sb.ID+"/app", nil), http.StatusOK, &st)
		if st.State == "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the app never ran: %+v", st)
		}
	}
	res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{wire.AgentPath, wire.CodeSubcommand, "--", "look at the app"}, TimeoutMS: 180_000})
	if res.ExitCode != 0 {
		t.Fatalf("exit %d\n%s\n%s\n%v", res.ExitCode, res.Stdout, res.Stderr, provider.Err())
	}
	if err := provider.Err(); err != nil || !provider.Done() {
		t.Errorf("the script: %v (done %v)", err, provider.Done())
	}
	for _, r := range provider.Requests() {
		for _, m := range r.Messages {
			if strings.Contains(m.Content, "the host's own page") {
				t.Errorf("the browser reached the host's loopback: %q", m.Content)
			}
		}
	}
}
