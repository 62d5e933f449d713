package coder_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/agent/coder"
	"github.com/paddockhq/paddock/internal/gateway"
	"github.com/paddockhq/paddock/internal/gateway/scripted"
)

// session is a harness talking to a scripted provider through the real gateway.
type session struct {
	t         testing.TB
	api       string
	provider  *scripted.Provider
	workspace string
	state     string
	baseURL   string
	mu        sync.Mutex
	events    []coder.Event
	conns     atomic.Int32 // connections the gateway's front accepted
	endDelay  atomic.Int64 // how long the front holds the end of a body, as the control plane's ledger does
}

// newSession serves script behind a real gateway (configured by gw) and returns a
// session whose workspace holds files.
func newSession(t testing.TB, api, script string, files map[string]string, gw func(*gateway.Provider)) *session {
	t.Helper()
	sc, err := scripted.Load(filepath.Join("testdata", script))
	if err != nil {
		t.Fatal(err)
	}
	return newSessionFrom(t, api, sc, files, gw)
}

// newSessionFrom is newSession with a script already parsed.
func newSessionFrom(t testing.TB, api string, sc scripted.Script, files map[string]string, gw func(*gateway.Provider)) *session {
	t.Helper()
	s := &session{t: t, api: api, provider: scripted.New(sc), workspace: t.TempDir(), state: t.TempDir()}
	up := httptest.NewServer(s.provider)
	t.Cleanup(up.Close)
	p := gateway.Provider{Name: "scripted", Kind: api, BaseURL: up.URL, APIKey: "sk-platform-key"}
	if gw != nil {
		gw(&p)
	}
	g, err := gateway.New(gateway.Config{Providers: []gateway.Provider{p}}, gateway.Options{Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	caller := gateway.Caller{UserID: "u1", SandboxID: "sb1"}
	front := httptest.NewUnstartedServer(http.StripPrefix("/gateway", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.ServeHTTP(w, r.WithContext(gateway.WithCaller(r.Context(), caller)))
		if d := time.Duration(s.endDelay.Load()); d > 0 {
			_ = http.NewResponseController(w).Flush()
			time.Sleep(d)
		}
	})))
	front.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	front.Start()
	t.Cleanup(front.Close)
	s.baseURL = front.URL + "/gateway/scripted"
	if api == coder.APIOpenAI {
		s.baseURL += "/v1"
	}
	for name, content := range files {
		p := filepath.Join(s.workspace, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func (s *session) config() coder.Config {
	return coder.Config{API: s.api, Workspace: s.workspace, StateDir: s.state, BaseURL: s.baseURL, APIKey: "sandbox-placeholder", Model: "scripted-1"}
}

// run runs one turn with cfg changed by change, bounded by a generous deadline so that a
// hung harness fails the test instead of hanging it.
func (s *session) run(prompt string, change func(*coder.Config)) (string, error) {
	s.t.Helper()
	cfg := s.config()
	if change != nil {
		change(&cfg)
	}
	a, err := coder.New(cfg, func(e coder.Event) {
		s.mu.Lock()
		s.events = append(s.events, e)
		s.mu.Unlock()
	})
	if err != nil {
		s.t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	answer, err := a.Run(ctx, prompt)
	if ctx.Err() != nil {
		s.t.Fatalf("the turn did not end within 2 minutes: the harness hung")
	}
	return answer, err
}

func (s *session) file(name string) string {
	b, err := os.ReadFile(filepath.Join(s.workspace, name))
	if err != nil {
		s.t.Fatal(err)
	}
	return string(b)
}

func (s *session) scriptDone() {
	s.t.Helper()
	if err := s.provider.Err(); err != nil {
		s.t.Fatal(err)
	}
	if !s.provider.Done() {
		s.t.Fatal("the script's steps were not all taken")
	}
}

// last is the last event of type typ.
func (s *session) last(typ string) (coder.Event, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.events) - 1; i >= 0; i-- {
		if s.events[i].Type == typ {
			return s.events[i], true
		}
	}
	return coder.Event{}, false
}

func (s *session) types() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, e := range s.events {
		if e.Type != coder.EvText {
			out = append(out, e.Type+":"+e.Tool)
		}
	}
	return out
}

// apis are the wire formats every session runs in.
var apis = []string{coder.APIOpenAI, coder.APIAnthropic}

func TestEditFile(t *testing.T) {
	for _, api := range apis {
		t.Run(api, func(t *testing.T) { testEditFile(t, api) })
	}
}

func testEditFile(t *testing.T, api string) {
	s := newSession(t, api, "edit_file.json", map[string]string{"index.html": "<h1 style=\"color: red\">Hello</h1>\n"}, nil)
	answer, err := s.run("make the header blue", nil)
	if err != nil {
		t.Fatal(err)
	}
	s.scriptDone()
	if got := s.file("index.html"); got != "<h1 style=\"color: blue\">Hello</h1>\n" {
		t.Errorf("index.html = %q", got)
	}
	if answer != "The header is blue now." {
		t.Errorf("answer %q", answer)
	}
	want := "turn: tool_call:read_file tool_result:read_file tool_call:edit_file tool_result:edit_file answer: done:"
	if got := strings.Join(s.types(), " "); got != want {
		t.Errorf("events\n got %s\nwant %s", got, want)
	}
	// The text streamed in pieces before the tool call.
	var text strings.Builder
	s.mu.Lock()
	for _, e := range s.events {
		if e.Type == coder.EvText && e.Step == 1 {
			text.WriteString(e.Text)
		}
	}
	s.mu.Unlock()
	if text.String() != "Let me look at the page." {
		t.Errorf("streamed text %q", text.String())
	}
}

func TestFixFailingTest(t *testing.T) {
	for _, api := range apis {
		t.Run(api, func(t *testing.T) { testFixFailingTest(t, api) })
	}
}

func testFixFailingTest(t *testing.T, api string) {
	s := newSession(t, api, "fix_test.json", map[string]string{
		"add.sh":  "expr $1 + $2 + 1\n",
		"test.sh": "got=$(sh add.sh 2 3)\nif [ \"$got\" != 5 ]; then echo \"FAIL: add 2 3 = $got, want 5\"; exit 1; fi\necho ok\n",
	}, nil)
	if _, err := s.run("fix the failing test", nil); err != nil {
		t.Fatal(err)
	}
	s.scriptDone()
	if got := s.file("add.sh"); got != "expr $1 + $2\n" {
		t.Errorf("add.sh = %q", got)
	}
}

// The model's bad output ends in a message to it, and the turn goes on.
func TestBadToolCalls(t *testing.T) {
	for _, tc := range []struct {
		script string
		lastOK bool // whether the last tool call (after the bad ones) succeeded
	}{
		{"unknown_tool.json", false},
		{"malformed_arguments.json", true},
	} {
		for _, api := range apis {
			t.Run(tc.script+"/"+api, func(t *testing.T) {
				s := newSession(t, api, tc.script, map[string]string{"index.html": "Hello\n"}, nil)
				if _, err := s.run("do it", nil); err != nil {
					t.Fatal(err)
				}
				s.scriptDone()
				if e, _ := s.last(coder.EvToolResult); e.OK == nil || *e.OK != tc.lastOK {
					t.Errorf("the last tool result: %+v, want ok %v", e, tc.lastOK)
				}
			})
		}
	}
}

// Each way a turn stops says which, and ends the turn: a tool loop that never ends, a
// stream cut mid-way, a stalled stream, the provider down, rate-limited, out of budget.
func TestTurnStops(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	for _, tc := range []struct {
		name, script string
		gw           func(*gateway.Provider)
		cfg          func(*coder.Config)
		kind, msg    string
	}{
		{name: "step budget", script: "endless_loop.json", cfg: func(c *coder.Config) { c.MaxSteps = 5 },
			kind: coder.KindStepBudget, msg: "asked for tools 5 times"},
		{name: "stream cut", script: "stream_cut.json",
			kind: coder.KindStreamCut, msg: "broke off after 3 events"},
		{name: "provider down", script: "stream_cut.json", gw: func(p *gateway.Provider) { p.BaseURL = closed.URL },
			kind: coder.KindUnavailable, msg: `provider "scripted" is not reachable`},
		{name: "rate limited", script: "endless_loop.json", gw: func(p *gateway.Provider) { p.RequestsPerMinute = 1 },
			cfg:  func(c *coder.Config) { c.MaxRetryWait = time.Second },
			kind: coder.KindRateLimited, msg: "requests per minute limit reached"},
		{name: "out of budget", script: "endless_loop.json", gw: func(p *gateway.Provider) { p.TokensPerDay = 1 },
			kind: coder.KindOutOfBudget, msg: "tokens per day limit reached"},
	} {
		for _, api := range apis {
			t.Run(tc.name+"/"+api, func(t *testing.T) {
				s := newSession(t, api, tc.script, nil, tc.gw)
				_, err := s.run("go", tc.cfg)
				if !errors.Is(err, coder.ErrTurnStopped) {
					t.Fatalf("err = %v, want the turn stopped", err)
				}
				e, ok := s.last(coder.EvError)
				if !ok || e.Kind != tc.kind || !strings.Contains(e.Message, tc.msg) {
					t.Fatalf("error event %+v, want kind %s with %q", e, tc.kind, tc.msg)
				}
				if d, _ := s.last(coder.EvDone); d.Kind != tc.kind {
					t.Errorf("done event %+v", d)
				}
				if tc.kind == coder.KindStepBudget && len(s.provider.Requests()) != 5 {
					t.Errorf("the model was asked %d times, want 5", len(s.provider.Requests()))
				}
			})
		}
	}
}

// A stream that goes silent mid-answer ends the turn after the idle timeout.
func TestStalledStream(t *testing.T) {
	s := newSession(t, coder.APIOpenAI, "stalled.json", nil, nil)
	_, err := s.run("go", func(c *coder.Config) { c.IdleTimeout = 300 * time.Millisecond })
	if e, _ := s.last(coder.EvError); !errors.Is(err, coder.ErrTurnStopped) || e.Kind != coder.KindStalled {
		t.Fatalf("err %v, event %+v", err, e)
	}
}

// A 429 with a short Retry-After is waited out, and the turn goes on.
func TestRateLimitWait(t *testing.T) {
	s := newSession(t, coder.APIOpenAI, "retry_after.json", nil, nil)
	answer, err := s.run("go", nil)
	if err != nil {
		t.Fatal(err)
	}
	s.scriptDone()
	w, ok := s.last(coder.EvWait)
	if !ok || w.Kind != coder.KindRateLimited || w.RetryAfter != 1 || !strings.Contains(w.Message, "slow down") {
		t.Errorf("wait event %+v", w)
	}
	if answer != "after the wait" {
		t.Errorf("answer %q", answer)
	}
}

// The conversation survives the harness: a second process continues it.
func TestConversationSurvivesRestart(t *testing.T) {
	s := newSession(t, coder.APIOpenAI, "two_turns.json", nil, nil)
	if _, err := s.run("remember the word kumquat", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.run("what was the word?", nil); err != nil {
		t.Fatal(err)
	}
	s.scriptDone()
	reqs := s.provider.Requests()
	second := reqs[len(reqs)-1]
	var roles []string
	for _, m := range second.Messages {
		roles = append(roles, m.Role)
	}
	if got := strings.Join(roles, ","); got != "system,user,assistant,user" {
		t.Fatalf("the second turn sent %s, want the first turn's messages too", got)
	}
	if d, _ := s.last(coder.EvDone); d.Turn != 2 {
		t.Errorf("the second run is turn %d", d.Turn)
	}
}

// The conversation may not live in the workspace, where undo would rewrite it.
func TestStateOutsideWorkspace(t *testing.T) {
	s := newSession(t, coder.APIOpenAI, "two_turns.json", nil, nil)
	cfg := s.config()
	cfg.StateDir = filepath.Join(s.workspace, ".agent")
	if _, err := coder.New(cfg, func(coder.Event) {}); err == nil || !strings.Contains(err.Error(), "inside the workspace") {
		t.Fatalf("err = %v", err)
	}
}

// The conversation's events are kept across runs for the desktop to show again
// (--history): every turn's, in order, with the model's streamed text as one event per
// answer; --reset forgets them with the conversation.
func TestHistory(t *testing.T) {
	s := newSession(t, coder.APIOpenAI, "edit_file.json", map[string]string{"index.html": "<h1 style=\"color: red\">Hello</h1>\n"}, nil)
	if _, err := s.run("make the header blue", nil); err != nil {
		t.Fatal(err)
	}
	var buf strings.Builder
	if err := coder.History(s.state, &buf); err != nil {
		t.Fatal(err)
	}
	var logged []coder.Event
	for line := range strings.Lines(buf.String()) {
		var e coder.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("a history line is not an event: %q", line)
		}
		logged = append(logged, e)
	}
	s.mu.Lock()
	var want []coder.Event
	text := map[int]string{}
	for _, e := range s.events {
		if e.Type == coder.EvText {
			text[e.Step] += e.Text
			continue
		}
		want = append(want, e)
	}
	s.mu.Unlock()
	var got []coder.Event
	gotText := map[int]string{}
	for _, e := range logged {
		if e.Type == coder.EvText {
			if gotText[e.Step] != "" {
				t.Errorf("step %d's text was logged in more than one event", e.Step)
			}
			gotText[e.Step] += e.Text
			continue
		}
		got = append(got, e)
	}
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotText, text) {
		t.Fatalf("history:\n%+v\n%v\nwant\n%+v\n%v", got, gotText, want, text)
	}
	if len(got) == 0 || got[0].Type != coder.EvTurn || got[len(got)-1].Type != coder.EvDone {
		t.Errorf("history does not run from the turn to its end: %+v", got)
	}
	if err := coder.Reset(s.state); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if err := coder.History(s.state, &buf); err != nil || buf.Len() != 0 {
		t.Errorf("after reset: %q, %v", buf.String(), err)
	}
}

// TestConnectionReused: the requests of a turn share the gateway's connections, even
// when the end of an answer's body comes after its last event. That end is read off the
// turn's path; a body closed before it closes its connection, and every request dials
// again.
func TestConnectionReused(t *testing.T) {
	for _, api := range apis {
		t.Run(api, func(t *testing.T) {
			call := `{"respond": {"tool_calls": [{"name": "run_command", "arguments": {"command": "sleep 0.2"}}]}},`
			sc, err := scripted.Parse([]byte(`{"steps": [` + strings.Repeat(call, 3) + `{"respond": {"content": "done"}}]}`))
			if err != nil {
				t.Fatal(err)
			}
			s := newSessionFrom(t, api, sc, nil, nil)
			s.endDelay.Store(int64(20 * time.Millisecond))
			if _, err := s.run("go", nil); err != nil {
				t.Fatal(err)
			}
			if n, asked := s.conns.Load(), len(s.provider.Requests()); asked != 4 || int(n) >= asked {
				t.Errorf("%d requests on %d connections, want 4 requests on fewer", asked, n)
			}
		})
	}
}
