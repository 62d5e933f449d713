package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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

	code("take that back")
	if got := fileContent(t, alice, sb.ID, "index.html"); got != "<h1 style=\"color: red\">Hi</h1>\n" {
		t.Errorf("index.html after undo: %q", got)
	}
	if err := provider.Err(); err != nil || !provider.Done() {
		t.Errorf("the script: %v (done %v)", err, provider.Done())
	}
}
