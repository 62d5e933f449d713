// Package coder is the coding agent that runs in a sandbox (`paddock-agent code`): a
// tool-calling loop against the provider gateway's OpenAI-compatible chat-completions
// endpoint or its Anthropic Messages endpoint, with tools to read, write, edit, list and search the workspace's files, run
// commands, read the app's state and undo. Its system prompt and tool descriptions are
// the files in prompts/, embedded.
//
// It runs as the sandbox user, in its own process: the agent daemon never loads it. It
// holds no platform credential: the gateway adds the provider key, and the control plane
// knows the sandbox from the connection its requests arrive on. Each run is one turn of a
// conversation kept in a file outside the workspace (so that undo does not rewrite it,
// and a restart of the harness keeps it); each turn is one transaction of the workspace's
// history, committed as one checkpoint named for the turn. Every step streams as a JSON line (see Event) for the CLI and
// the desktop to show as it happens.
//
// Threat model: the model's output is untrusted input. A call of an unknown tool,
// arguments that are not JSON, a path out of the workspace, a loop of tool calls that does
// not end and a provider that stalls or breaks off each end in a message, never in a hung
// or crashed harness. The file tools keep to the workspace (os.Root), but they are a
// convenience, not a boundary: run_command can do whatever the sandbox user can, and the
// sandbox is the boundary.
package coder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Config configures an Agent.
type Config struct {
	// Workspace is the directory the tools work in (the sandbox's /workspace).
	Workspace string
	// StateDir holds the conversation; it must be outside Workspace.
	StateDir string
	// API is the wire format of BaseURL: APIOpenAI (the default) or APIAnthropic.
	API string
	// BaseURL is the OpenAI-compatible base, ending in /v1 (the sandbox's OPENAI_BASE_URL),
	// or the Anthropic base, without /v1 (ANTHROPIC_BASE_URL).
	BaseURL string
	// APIKey is sent as the bearer token; in a sandbox it is a placeholder that the
	// gateway replaces.
	APIKey string
	// Model is the model asked for.
	Model string
	// MaxSteps bounds the model's answers in one turn (default 40): a model that keeps
	// calling tools is stopped there.
	MaxSteps int
	// IdleTimeout bounds the silence inside one answer (default 2 minutes).
	IdleTimeout time.Duration
	// MaxRetryWait is the longest Retry-After the harness waits for before it asks again
	// (default 60 s); a longer one stops the turn.
	MaxRetryWait time.Duration
	// MaxContextBytes bounds the conversation sent to the model (default 512 KiB): past
	// it the oldest turns are left out, whole, and the model is told so.
	MaxContextBytes int
	// Host checkpoints, undoes and reports the app; nil outside a sandbox.
	Host Host
	// Keeper keeps the conversation off the sandbox at the end of every turn; nil
	// outside a sandbox.
	Keeper Keeper
	// HTTPClient reaches the provider; nil uses one without an overall timeout (answers
	// stream for minutes; IdleTimeout bounds silence instead).
	HTTPClient *http.Client
}

// Wire formats of Config.API.
const (
	APIOpenAI    = "openai"
	APIAnthropic = "anthropic"
)

// Event is one step of a turn, written as one JSON line.
type Event struct {
	Type string `json:"type"` // one of the Ev* constants
	Turn int    `json:"turn"`
	Step int    `json:"step,omitempty"`
	// Text is a piece of the model's answer (EvText) or the whole answer (EvAnswer).
	Text string `json:"text,omitempty"`
	// Tool, CallID and Args are a tool call's (EvToolCall, EvToolResult).
	Tool   string `json:"tool,omitempty"`
	CallID string `json:"call_id,omitempty"`
	Args   string `json:"args,omitempty"`
	// Output is a tool's result, clipped for display; OK says whether it succeeded.
	Output string `json:"output,omitempty"`
	OK     *bool  `json:"ok,omitempty"`
	// Kind and Message say what went wrong (EvError, EvWait).
	Kind    string `json:"kind,omitempty"`
	Message string `json:"message,omitempty"`
	// RetryAfter is how long the harness waits, in seconds (EvWait).
	RetryAfter float64 `json:"retry_after,omitempty"`
	// Checkpoint is the ID of the turn's checkpoint (EvCheckpoint).
	Checkpoint string `json:"checkpoint,omitempty"`
}

// Event types.
const (
	EvTurn       = "turn"        // a turn began; Text is the user's message
	EvText       = "text"        // a piece of the model's text, as it streams
	EvToolCall   = "tool_call"   // the model called a tool
	EvToolResult = "tool_result" // what the tool answered
	EvWait       = "wait"        // rate limited: waiting RetryAfter before asking again
	EvError      = "error"       // the turn stopped: Kind and Message say why
	EvCheckpoint = "checkpoint"  // the turn's checkpoint
	EvRecovered  = "recovered"   // an unfinished turn's changes were rolled back
	EvAnswer     = "answer"      // the model's final answer
	EvDone       = "done"        // the turn ended
)

// Kinds of EvError the harness itself gives (the rest are ProviderError's).
const (
	KindStepBudget = "step_budget"
	KindCheckpoint = "checkpoint_failed"
	KindCanceled   = "canceled"
)

// ErrTurnStopped is what Run returns when the turn stopped before the model's answer; the
// EvError event says why.
var ErrTurnStopped = errors.New("the turn stopped")

// Agent runs turns of one sandbox's conversation.
type Agent struct {
	cfg    Config
	turn   int
	prompt string
	inTx   bool // the turn's transaction is open
	llm    completer
	tools  *toolbox
	conv   *conversation
	events *eventLog
	lock   *os.File // the state directory's, held until Close
	emit   func(Event)
}

// New opens the workspace and the conversation. emit receives every event in order; it
// is called from Run's goroutine.
func New(cfg Config, emit func(Event)) (*Agent, error) {
	if cfg.Model == "" {
		return nil, fmt.Errorf("model: required (give --model or PADDOCK_AGENT_MODEL): %w", errdefs.ErrInvalidArgument)
	}
	if cfg.BaseURL == "" {
		return nil, fmt.Errorf("base URL: required (OPENAI_BASE_URL or ANTHROPIC_BASE_URL is not set: is the gateway configured?): %w", errdefs.ErrInvalidArgument)
	}
	if cfg.MaxSteps <= 0 {
		cfg.MaxSteps = 40
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 2 * time.Minute
	}
	if cfg.MaxContextBytes <= 0 {
		cfg.MaxContextBytes = 512 << 10
	}
	if cfg.MaxRetryWait <= 0 {
		cfg.MaxRetryWait = time.Minute
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	root, err := os.OpenRoot(cfg.Workspace)
	if err != nil {
		return nil, fmt.Errorf("workspace %s: %w", cfg.Workspace, err)
	}
	if err := checkStateDir(cfg.StateDir, cfg.Workspace); err != nil {
		root.Close()
		return nil, err
	}
	lock, err := lockState(cfg.StateDir)
	if err != nil {
		root.Close()
		return nil, err
	}
	conv, err := openConversation(cfg.StateDir, cfg.Workspace)
	if err != nil {
		root.Close()
		lock.Close()
		return nil, err
	}
	events, err := openEventLog(cfg.StateDir)
	if err != nil {
		root.Close()
		lock.Close()
		return nil, err
	}
	a := &Agent{cfg: cfg, conv: conv, events: events, lock: lock, emit: func(e Event) {
		events.write(e)
		emit(e)
	}}
	switch cfg.API {
	case APIOpenAI, "":
		a.llm = &client{base: cfg.BaseURL, key: cfg.APIKey, model: cfg.Model, http: hc, idle: cfg.IdleTimeout}
	case APIAnthropic:
		a.llm = &anthropicClient{base: cfg.BaseURL, key: cfg.APIKey, model: cfg.Model, http: hc, idle: cfg.IdleTimeout}
	default:
		root.Close()
		events.close()
		lock.Close()
		return nil, fmt.Errorf("api %q: want %s or %s: %w", cfg.API, APIOpenAI, APIAnthropic, errdefs.ErrInvalidArgument)
	}
	a.tools = &toolbox{dir: cfg.Workspace, root: root, host: cfg.Host, undo: a.undo, browser: &browserSession{stateDir: cfg.StateDir}}
	return a, nil
}

// Close ends the browser and releases the workspace and the event log.
func (a *Agent) Close() error {
	a.tools.browser.close()
	return errors.Join(a.tools.root.Close(), a.events.close(), a.lock.Close())
}

// Run runs one turn: prompt, then the model's tool calls until it answers, the step
// budget runs out or the provider fails, then a checkpoint. It returns the answer, or
// ErrTurnStopped (wrapping the cause) when the turn stopped first.
func (a *Agent) Run(ctx context.Context, prompt string) (string, error) {
	turn := a.conv.begin(prompt)
	a.turn, a.prompt = turn, prompt
	a.emit(Event{Type: EvTurn, Turn: turn, Text: prompt})
	note := a.recoverTurn(ctx)
	if note == "" {
		note = a.workspaceMoved(ctx)
	}
	if note != "" {
		_ = a.conv.insertNote(note) // before the prompt: the model reads it first
	}
	a.beginTurn(ctx)
	answer, stopErr := a.loop(ctx, turn)
	a.endTurn(ctx)
	defer a.keep(ctx)
	if stopErr != nil {
		kind, msg := describeStop(stopErr)
		a.emit(Event{Type: EvError, Turn: turn, Kind: kind, Message: msg})
		a.emit(Event{Type: EvDone, Turn: turn, Kind: kind})
		return "", fmt.Errorf("%w: %w", ErrTurnStopped, stopErr)
	}
	a.emit(Event{Type: EvAnswer, Turn: turn, Text: answer})
	a.emit(Event{Type: EvDone, Turn: turn})
	return answer, nil
}

// keep hands the conversation, as the turn left it, to the Keeper. A failure is logged
// on stderr: the turn's work is done, and the sandbox keeps its own copy.
func (a *Agent) keep(ctx context.Context) {
	if a.cfg.Keeper == nil {
		return
	}
	ctx, cancel := hostCtx(ctx)
	defer cancel()
	if err := SaveState(ctx, a.cfg.Keeper, a.cfg.StateDir); err != nil {
		fmt.Fprintf(os.Stderr, "paddock-agent: %v\n", err)
	}
}

// loop asks the model and runs its tool calls until it answers without one.
func (a *Agent) loop(ctx context.Context, turn int) (string, error) {
	tools := Tools()
	var saving <-chan error // the last tool results' save, under way while the model is asked
	for step := 1; ; step++ {
		if step > a.cfg.MaxSteps {
			if err := saved(saving); err != nil {
				return "", err
			}
			return "", &stepBudget{a.cfg.MaxSteps}
		}
		msgs := append([]Message{{Role: "system", Content: systemPrompt}}, window(a.conv.Messages, a.cfg.MaxContextBytes)...)
		m, err := a.ask(ctx, turn, step, msgs, tools)
		if serr := saved(saving); serr != nil {
			return "", serr
		}
		if err != nil {
			return "", err
		}
		if len(m.ToolCalls) == 0 {
			if err := a.conv.add(m); err != nil {
				return "", err
			}
			return m.Content, nil
		}
		// A call is saved with its results, once, while the model is asked for the next
		// message: saved alone, or killed before the save lands, repair drops the call.
		a.conv.push(m)
		for _, tc := range m.ToolCalls {
			a.emit(Event{Type: EvToolCall, Turn: turn, Step: step, Tool: tc.Function.Name, CallID: tc.ID, Args: errdefs.Clip(tc.Function.Arguments, 4096)})
			out, err := a.tools.call(ctx, tc.Function.Name, tc.Function.Arguments)
			ok := err == nil
			if err != nil {
				out = "error: " + err.Error()
			}
			if out == "" {
				out = "(no output)"
			}
			a.emit(Event{Type: EvToolResult, Turn: turn, Step: step, Tool: tc.Function.Name, CallID: tc.ID, Output: errdefs.Clip(out, 8192), OK: &ok})
			a.conv.push(Message{Role: "tool", ToolCallID: tc.ID, Content: out})
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
		}
		saving = a.conv.saveBehind()
	}
}

// saved waits for a save begun by saveBehind, if any.
func saved(saving <-chan error) error {
	if saving == nil {
		return nil
	}
	return <-saving
}

// ask asks the model once, waiting out a rate limit's Retry-After a few times.
func (a *Agent) ask(ctx context.Context, turn, step int, msgs []Message, tools []Tool) (Message, error) {
	for attempt := 0; ; attempt++ {
		m, err := a.llm.complete(ctx, msgs, tools, func(s string) {
			a.emit(Event{Type: EvText, Turn: turn, Step: step, Text: s})
		})
		pe, ok := errors.AsType[*ProviderError](err)
		if !ok || pe.Kind != KindRateLimited || attempt == maxRetryCount || pe.RetryAfter > a.cfg.MaxRetryWait {
			return m, err
		}
		wait := max(pe.RetryAfter, time.Second)
		a.emit(Event{Type: EvWait, Turn: turn, Step: step, Kind: pe.Kind, Message: pe.Msg, RetryAfter: wait.Seconds()})
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return Message{}, ctx.Err()
		case <-t.C:
		}
	}
}

// turnMessage names the turn's checkpoint.
func (a *Agent) turnMessage() string {
	return fmt.Sprintf("agent turn %d: %s", a.turn, errdefs.Clip(a.prompt, 200))
}

// hostCtx bounds a call to the host, even when the turn was canceled: the turn's work
// is still recorded.
func hostCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
}

// beginTurn opens the transaction that makes the turn one checkpoint. When it cannot
// (another transaction is open), the turn goes on and ends with a plain checkpoint.
func (a *Agent) beginTurn(ctx context.Context) {
	if a.cfg.Host == nil {
		return
	}
	ctx, cancel := hostCtx(ctx)
	defer cancel()
	id, err := a.cfg.Host.Begin(ctx, a.turnMessage())
	if err != nil {
		a.emit(Event{Type: EvError, Turn: a.turn, Kind: KindCheckpoint,
			Message: "the turn is not one checkpoint (its changes are recorded as the workspace's own): " + err.Error()})
		return
	}
	a.inTx = true
	if err := a.conv.setOpenTx(id); err != nil {
		a.emit(Event{Type: EvError, Turn: a.turn, Kind: KindCheckpoint, Message: err.Error()})
	}
}

// recoverTurn rolls back the transaction of a turn that never ended (the harness was
// killed in it), so that the workspace is at the last checkpoint, and tells the person
// watching. It returns the note for the model, or "" when there was nothing to roll back.
func (a *Agent) recoverTurn(ctx context.Context) string {
	left := a.conv.OpenTx
	if a.cfg.Host == nil || left == "" {
		return ""
	}
	ctx, cancel := hostCtx(ctx)
	defer cancel()
	open, err := a.cfg.Host.OpenTransaction(ctx)
	if err != nil {
		a.emit(Event{Type: EvError, Turn: a.turn, Kind: KindCheckpoint, Message: "checking for an unfinished turn: " + err.Error()})
		return ""
	}
	_ = a.conv.setOpenTx("")
	if open != left {
		return "" // committed or rolled back since, by someone else: not ours to touch
	}
	current, err := a.cfg.Host.Rollback(ctx)
	if err != nil {
		a.emit(Event{Type: EvError, Turn: a.turn, Kind: KindCheckpoint, Message: "rolling back the unfinished turn: " + err.Error()})
		return ""
	}
	msg := fmt.Sprintf("the previous turn was stopped before it ended; its changes were rolled back, and the workspace is at checkpoint %s again", current)
	a.emit(Event{Type: EvRecovered, Turn: a.turn, Message: msg, Checkpoint: current})
	return "(paddock: " + msg + ")"
}

// Recover rolls back the turn a killed run left unfinished, as the next turn would, but
// at once and without the model: the workspace is at the last checkpoint again, and an
// EvRecovered event of that turn says so. It does nothing outside a sandbox (no Host) or
// when no turn was left unfinished; it fails with ErrBusy while a turn is under way.
func Recover(ctx context.Context, cfg Config, emit func(Event)) error {
	if cfg.Host == nil {
		return nil
	}
	if err := checkStateDir(cfg.StateDir, cfg.Workspace); err != nil {
		return err
	}
	lock, err := lockState(cfg.StateDir)
	if err != nil {
		return err
	}
	defer lock.Close()
	conv, err := openConversation(cfg.StateDir, cfg.Workspace)
	if err != nil {
		return err
	}
	events, err := openEventLog(cfg.StateDir)
	if err != nil {
		return err
	}
	defer events.close()
	a := &Agent{cfg: cfg, conv: conv, events: events, turn: conv.Turns, emit: func(e Event) {
		events.write(e)
		emit(e)
	}}
	if note := a.recoverTurn(ctx); note != "" {
		if err := conv.add(Message{Role: "user", Content: note}); err != nil {
			return err
		}
	}
	a.keep(ctx)
	return nil
}

// workspaceMoved is a note for the model when the workspace is no longer at the
// checkpoint the last turn ended on (a turn undone from the desktop or the CLI, a
// restore, someone else's edits): what it saw of the files may be stale. It returns ""
// otherwise, and when the host cannot say: the note is a help, not the turn's work.
func (a *Agent) workspaceMoved(ctx context.Context) string {
	last := a.conv.LastCheckpoint
	if a.cfg.Host == nil || last == "" {
		return ""
	}
	ctx, cancel := hostCtx(ctx)
	defer cancel()
	current, err := a.cfg.Host.Current(ctx)
	if err != nil || current == last {
		return ""
	}
	return fmt.Sprintf("(paddock: since your last turn the workspace moved from checkpoint %s to checkpoint %s: a turn was undone, a checkpoint restored, or files were changed by someone else. Read files again before you rely on what you saw of them.)", last, current)
}

// endTurn commits the turn's transaction, or checkpoints when there is none.
func (a *Agent) endTurn(ctx context.Context) {
	if a.cfg.Host == nil {
		return
	}
	ctx, cancel := hostCtx(ctx)
	defer cancel()
	var id string
	var err error
	if a.inTx {
		a.inTx = false
		if id, err = a.cfg.Host.Commit(ctx); err == nil {
			err = a.conv.setOpenTx("")
		}
	} else {
		id, err = a.cfg.Host.Checkpoint(ctx, a.turnMessage())
	}
	if err != nil {
		a.emit(Event{Type: EvError, Turn: a.turn, Kind: KindCheckpoint, Message: "the turn's checkpoint was not taken: " + err.Error()})
		return
	}
	_ = a.conv.setLastCheckpoint(id) // a failed save shows at the next add
	a.emit(Event{Type: EvCheckpoint, Turn: a.turn, Checkpoint: id})
}

// undo is the undo tool: it commits the turn so far (undo is refused inside a
// transaction), takes the workspace back one checkpoint, and opens the turn again.
func (a *Agent) undo(ctx context.Context) (string, error) {
	if a.cfg.Host == nil {
		return "", fmt.Errorf("undo is not available here: the harness runs outside a paddock sandbox (no %s): %w", servicesEnv, errdefs.ErrUnavailable)
	}
	if a.inTx {
		a.endTurn(ctx)
	}
	out, err := a.cfg.Host.Undo(ctx)
	a.beginTurn(ctx)
	return out, err
}

type stepBudget struct{ n int }

func (s *stepBudget) Error() string {
	return fmt.Sprintf("the model asked for tools %d times in this turn without answering; the turn stopped at its step budget (--max-steps). Say what to do next to continue", s.n)
}

func (s *stepBudget) Unwrap() error { return errdefs.ErrLimitExceeded }

// describeStop is the kind and message of the error that stopped a turn.
func describeStop(err error) (kind, msg string) {
	if pe, ok := errors.AsType[*ProviderError](err); ok {
		return pe.Kind, pe.Msg
	}
	if _, ok := errors.AsType[*stepBudget](err); ok {
		return KindStepBudget, err.Error()
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return KindCanceled, "the turn was canceled; the workspace holds what it had done so far"
	}
	return "internal", err.Error()
}

// Messages are the conversation so far (without the system prompt).
func (a *Agent) Messages() []Message { return a.conv.Messages }

// encodeEvent is e as one JSON line.
func encodeEvent(e Event) []byte {
	b, _ := json.Marshal(e)
	return append(b, '\n')
}

// window is the most recent part of msgs that fits in max bytes, cut only where a user's
// message begins (so that no tool call is parted from its result), with a note of what was
// left out. The current turn is kept whole even when it alone is larger.
func window(msgs []Message, max int) []Message {
	size, cut := 0, -1
	for i := len(msgs) - 1; i >= 0; i-- {
		size += len(msgs[i].Content) + len(msgs[i].ToolCallID)
		for _, tc := range msgs[i].ToolCalls {
			size += len(tc.Function.Name) + len(tc.Function.Arguments) + len(tc.ID)
		}
		if msgs[i].Role != "user" {
			continue
		}
		if size > max && cut >= 0 {
			break
		}
		cut = i
	}
	if cut <= 0 {
		return msgs
	}
	note := Message{Role: "user", Content: fmt.Sprintf("(paddock: the %d oldest messages of this conversation were left out to fit the model's context)", cut)}
	return append([]Message{note}, msgs[cut:]...)
}
