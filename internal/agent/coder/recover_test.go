package coder_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/paddockhq/paddock/internal/agent/coder"
	"github.com/paddockhq/paddock/internal/gateway/scripted"
)

// txHost is a workspace history with one transaction at most: the Host side of a turn.
type txHost struct {
	mu        sync.Mutex
	open      string
	current   string // the checkpoint the workspace is at
	commits   int
	rollbacks int
}

func (h *txHost) Begin(context.Context, string) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.open != "" {
		return "", errors.New("a transaction is open")
	}
	h.open = "tx-1"
	return h.open, nil
}

func (h *txHost) Commit(context.Context) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.open = ""
	h.commits++
	h.current = fmt.Sprintf("cp-turn-%d", h.commits)
	return h.current, nil
}

func (h *txHost) Current(context.Context) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.current, nil
}

func (h *txHost) OpenTransaction(context.Context) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.open, nil
}

func (h *txHost) Rollback(context.Context) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.open = ""
	h.rollbacks++
	if h.current == "" {
		h.current = "cp-before"
	}
	return h.current, nil
}

func (h *txHost) Checkpoint(context.Context, string) (string, error) { return "cp-plain", nil }
func (h *txHost) Undo(context.Context) (string, error)               { return "undone", nil }
func (h *txHost) App(context.Context) (string, error)                { return "running", nil }
func (h *txHost) RestartApp(context.Context) (string, error)         { return "restarted", nil }

// One run at a time owns a sandbox's conversation: a second is refused while the first
// holds it, and may run once it has ended.
func TestOneRunAtATime(t *testing.T) {
	s := newSession(t, coder.APIOpenAI, "two_turns.json", nil, nil)
	first, err := coder.New(s.config(), func(coder.Event) {})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := coder.New(s.config(), func(coder.Event) {}); !errors.Is(err, coder.ErrBusy) || !strings.Contains(err.Error(), "under way") {
		t.Fatalf("a second run while the first holds the conversation: %v", err)
	}
	host := &txHost{open: "tx-1"}
	cfg := s.config()
	cfg.Host = host
	if err := coder.Recover(context.Background(), cfg, func(coder.Event) {}); !errors.Is(err, coder.ErrBusy) || host.rollbacks != 0 {
		t.Fatalf("recovering while a turn is under way: %v (%d rollbacks)", err, host.rollbacks)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second, err := coder.New(s.config(), func(coder.Event) {})
	if err != nil {
		t.Fatalf("a run after the first ended: %v", err)
	}
	second.Close()
}

// A turn killed before it ended leaves its transaction open; Recover rolls it back at
// once, without the model, says so as an event of that turn, and tells the model at the
// next turn. Nothing left open, it does nothing.
func TestRecover(t *testing.T) {
	s := newSession(t, coder.APIOpenAI, "two_turns.json", nil, nil)
	host := &txHost{}
	cfg := s.config()
	cfg.Host = host
	// The state a run killed mid-turn leaves: turn 1 begun, its transaction open.
	conv := `{"turns":1,"messages":[{"role":"user","content":"rewrite the page"}],"open_tx":"tx-1"}`
	if err := os.WriteFile(filepath.Join(s.state, "conversation.json"), []byte(conv), 0o600); err != nil {
		t.Fatal(err)
	}
	host.open = "tx-1"
	var evs []coder.Event
	if err := coder.Recover(context.Background(), cfg, func(e coder.Event) { evs = append(evs, e) }); err != nil {
		t.Fatal(err)
	}
	if host.rollbacks != 1 || host.open != "" {
		t.Fatalf("the unfinished turn's transaction: %d rollbacks, open %q", host.rollbacks, host.open)
	}
	if len(evs) != 1 || evs[0].Type != coder.EvRecovered || evs[0].Turn != 1 || evs[0].Checkpoint != "cp-before" || !strings.Contains(evs[0].Message, "rolled back") {
		t.Fatalf("events: %+v", evs)
	}
	var hist strings.Builder
	if err := coder.History(s.state, &hist); err != nil || !strings.Contains(hist.String(), `"type":"recovered"`) {
		t.Errorf("the history does not keep the recovery: %q %v", hist.String(), err)
	}

	evs = nil
	if err := coder.Recover(context.Background(), cfg, func(e coder.Event) { evs = append(evs, e) }); err != nil || len(evs) != 0 || host.rollbacks != 1 {
		t.Fatalf("a second recover: %v, %+v, %d rollbacks", err, evs, host.rollbacks)
	}
	// A transaction someone else opened is not the agent's to roll back.
	host.open = "tx-other"
	if err := coder.Recover(context.Background(), cfg, func(e coder.Event) { evs = append(evs, e) }); err != nil || len(evs) != 0 || host.rollbacks != 1 {
		t.Fatalf("recover with another's transaction open: %v, %+v, %d rollbacks", err, evs, host.rollbacks)
	}
	host.open = ""

	// The script's first step expects the new turn's prompt; the model sees the note too.
	if _, err := s.run("remember the word kumquat", func(c *coder.Config) { c.Host = host }); err != nil {
		t.Fatal(err)
	}
	reqs := s.provider.Requests()
	var all []string
	for _, m := range reqs[len(reqs)-1].Messages {
		all = append(all, m.Role+": "+string(m.Content))
	}
	if got := strings.Join(all, "\n"); !strings.Contains(got, "its changes were rolled back") || !strings.Contains(got, "rewrite the page") {
		t.Errorf("the model's view after a recovery:\n%s", got)
	}

	// Not recovered at once, the unfinished turn is rolled back by the next run's turn.
	path := filepath.Join(s.state, "conversation.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), `"turns":2`, `"turns":2,"open_tx":"tx-1"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	host.open = "tx-1"
	if _, err := s.run("what was the word?", func(c *coder.Config) { c.Host = host }); err != nil {
		t.Fatal(err)
	}
	if r, ok := s.last(coder.EvRecovered); !ok || r.Turn != 3 || host.rollbacks != 2 {
		t.Errorf("the next turn's recovery: %+v (%d rollbacks)", r, host.rollbacks)
	}
	s.scriptDone()
}

// A turn undone (or a checkpoint restored) between two turns: the next turn tells the
// model that the workspace moved, so that it does not trust what it saw of the files.
// The workspace where the last turn left it, nothing is said.
func TestToldWorkspaceMoved(t *testing.T) {
	sc, err := scripted.Parse([]byte(`{"steps": [
	  {"expect": {"last_role": "user", "last_contains": ["one"]}, "respond": {"content": "ok"}},
	  {"expect": {"last_role": "user", "last_contains": ["two"]}, "respond": {"content": "ok"}},
	  {"expect": {"last_role": "user", "last_contains": ["three"]}, "respond": {"content": "ok"}}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	s := newSessionFrom(t, coder.APIOpenAI, sc, nil, nil)
	host := &txHost{current: "cp-start"}
	withHost := func(c *coder.Config) { c.Host = host }
	for _, prompt := range []string{"one", "two"} {
		if _, err := s.run(prompt, withHost); err != nil {
			t.Fatal(err)
		}
	}
	host.current = "cp-turn-1" // the desktop's "Undo this turn" of turn 2
	if _, err := s.run("three", withHost); err != nil {
		t.Fatal(err)
	}
	s.scriptDone()
	reqs := s.provider.Requests()
	said := func(i int) string {
		var all []string
		for _, m := range reqs[i].Messages {
			all = append(all, m.Role+": "+string(m.Content))
		}
		return strings.Join(all, "\n")
	}
	for i := range 2 {
		if got := said(i); strings.Contains(got, "workspace moved") {
			t.Errorf("turn %d was told the workspace moved:\n%s", i+1, got)
		}
	}
	if got := said(2); !strings.Contains(got, "moved from checkpoint cp-turn-2 to checkpoint cp-turn-1") {
		t.Errorf("the turn after an undo was not told:\n%s", got)
	}
}
