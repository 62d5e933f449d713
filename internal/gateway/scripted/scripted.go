// Package scripted is a scripted LLM provider: an OpenAI chat-completions, OpenAI
// Responses and Anthropic messages server that answers from a script instead of a model,
// for testing agents end to end without one. It speaks each wire format as its provider
// does, streaming included. OpenAI chat: server-sent events of chat.completion.chunk
// objects, tool calls as streamed deltas (index, id, function name, then the arguments in
// fragments), a usage chunk when stream_options.include_usage asks for one, and data:
// [DONE]. OpenAI Responses: response.created, each output item added and done, text as
// response.output_text.delta, a function call's arguments as
// response.function_call_arguments.delta and .done, response.completed with the output
// and the usage. Anthropic: message_start, a content block per text and tool_use (its
// input as input_json_delta fragments), message_delta with the stop reason and usage,
// message_stop. Serve it on loopback and point the real gateway's base_url at it.
//
// A script is a list of steps, each an expectation of the request and the answer to give.
// Requests take the steps in order; one that does not meet its step's expectation is
// answered 400 with what was expected, and recorded (Err), so that a test fails saying
// which step went wrong. An answer can also be an HTTP error (a 429 with Retry-After), a
// stream cut after some events, a delay, or repeated for every further request (a model
// that never stops calling tools).
package scripted

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Script drives a Provider.
type Script struct {
	Name  string `json:"name"`
	Steps []Step `json:"steps"`
}

// Step is one request the script expects and the answer it gives.
type Step struct {
	Expect  Expect  `json:"expect"`
	Respond Respond `json:"respond"`
}

// Expect is what a request must hold; its zero value accepts any.
type Expect struct {
	// Model, when set, is the model the request must name.
	Model string `json:"model,omitempty"`
	// LastRole, when set, is the role of the request's last message.
	LastRole string `json:"last_role,omitempty"`
	// LastContains are strings the last message's content must each contain.
	LastContains []string `json:"last_contains,omitempty"`
	// Tools are tool names the request must offer.
	Tools []string `json:"tools,omitempty"`
}

// Respond is the answer to a request.
type Respond struct {
	// Content is the assistant's text.
	Content string `json:"content,omitempty"`
	// ToolCalls are the tools the assistant calls.
	ToolCalls []Call `json:"tool_calls,omitempty"`
	// Fragment is the size of the pieces that streamed text and arguments are cut into
	// (default 16 bytes).
	Fragment int `json:"fragment,omitempty"`
	// CutAfter, when > 0, closes the connection after that many events, unfinished.
	CutAfter int `json:"cut_after,omitempty"`
	// DelayMS waits before the answer's headers.
	DelayMS int `json:"delay_ms,omitempty"`
	// StallMS waits after the first event, mid-stream.
	StallMS int `json:"stall_ms,omitempty"`
	// Status, when set, answers with this HTTP status and Body (an error) instead.
	Status  int               `json:"status,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    json.RawMessage   `json:"body,omitempty"`
	// Repeat answers every further request with this step.
	Repeat bool `json:"repeat,omitempty"`
	// Usage is reported in the usage chunk (default 10 prompt, 5 completion tokens).
	Usage *Usage `json:"usage,omitempty"`
}

// Call is a tool call. Arguments is the JSON the assistant sends; ArgumentsRaw, when set,
// is sent as is instead (malformed JSON, for tests of the agent).
type Call struct {
	ID           string          `json:"id,omitempty"`
	Name         string          `json:"name"`
	Arguments    json.RawMessage `json:"arguments,omitempty"`
	ArgumentsRaw *string         `json:"arguments_raw,omitempty"`
}

// Usage is a completion's token counts.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// Request is a request as the provider read it, the same for both wire formats: an
// Anthropic user message that holds only tool results has the role "tool", and a
// message's Content is its text and its tool results' text, joined.
type Request struct {
	API          string // "openai" or "anthropic"
	Model        string
	Stream       bool
	IncludeUsage bool
	Messages     []RequestMessage
	Tools        []string
}

// RequestMessage is a message of a Request.
type RequestMessage struct {
	Role    string
	Content string
}

// openAIRequest is a chat-completions request body.
type openAIRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func (o openAIRequest) normal() Request {
	r := Request{API: "openai", Model: o.Model, Stream: o.Stream, IncludeUsage: o.StreamOptions != nil && o.StreamOptions.IncludeUsage}
	for _, m := range o.Messages {
		r.Messages = append(r.Messages, RequestMessage{Role: m.Role, Content: contentText(m.Content)})
	}
	for _, t := range o.Tools {
		r.Tools = append(r.Tools, t.Function.Name)
	}
	return r
}

// Load reads a script from a JSON file.
func Load(path string) (Script, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Script{}, err
	}
	return Parse(b)
}

// Parse reads a script, refusing unknown fields so that a typo in a script is an error.
func Parse(b []byte) (Script, error) {
	var s Script
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Script{}, fmt.Errorf("script: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	for i, st := range s.Steps {
		if st := st.Respond.Status; st != 0 && (st < 200 || st > 599) {
			return Script{}, fmt.Errorf("script: steps[%d].respond.status: %d: want an HTTP status from 200 to 599: %w", i, st, errdefs.ErrInvalidArgument)
		}
		for j, c := range st.Respond.ToolCalls {
			if c.Name == "" {
				return Script{}, fmt.Errorf("script: steps[%d].respond.tool_calls[%d].name: required: %w", i, j, errdefs.ErrInvalidArgument)
			}
		}
	}
	return s, nil
}

// Provider serves a Script. It is an http.Handler for POST /v1/chat/completions.
type Provider struct {
	script Script
	mu     sync.Mutex
	next   int
	reqs   []Request
	errs   []error
}

// New returns a Provider that serves s.
func New(s Script) *Provider { return &Provider{script: s} }

// Requests are the requests served so far, in order.
func (p *Provider) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Request(nil), p.reqs...)
}

// Err is every way the requests departed from the script, or nil.
func (p *Provider) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return errors.Join(p.errs...)
}

// Done says whether every step was taken.
func (p *Provider) Done() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.next >= len(p.script.Steps)
}

func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req Request
	body := http.MaxBytesReader(w, r.Body, 64<<20)
	switch {
	case r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/chat/completions"):
		var o openAIRequest
		if err := json.NewDecoder(body).Decode(&o); err != nil {
			writeError(w, http.StatusBadRequest, "scripted provider: the body is not a chat-completions request: "+err.Error())
			return
		}
		req = o.normal()
	case r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/messages"):
		var a anthropicRequest
		if err := json.NewDecoder(body).Decode(&a); err != nil {
			writeError(w, http.StatusBadRequest, "scripted provider: the body is not a messages request: "+err.Error())
			return
		}
		if err := a.validate(); err != nil {
			writeError(w, http.StatusBadRequest, "scripted provider: "+err.Error())
			return
		}
		req = a.normal()
	case r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/responses"):
		var q responsesRequest
		if err := json.NewDecoder(body).Decode(&q); err != nil {
			writeResponsesError(w, "the body is not a Responses API request: "+err.Error())
			return
		}
		if err := q.validate(); err != nil {
			writeResponsesError(w, err.Error())
			return
		}
		req = q.normal()
	default:
		writeError(w, http.StatusNotFound, "scripted provider: only POST …/chat/completions, …/messages and …/responses are served, not "+r.Method+" "+r.URL.Path)
		return
	}
	step, n, err := p.take(req)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	res := step.Respond
	if res.DelayMS > 0 {
		select {
		case <-time.After(time.Duration(res.DelayMS) * time.Millisecond):
		case <-r.Context().Done():
			return
		}
	}
	if res.Status != 0 {
		for k, v := range res.Headers {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(res.Status)
		_, _ = w.Write(res.Body)
		return
	}
	switch {
	case req.API == "responses" && !req.Stream:
		writeResponsesWhole(w, n, req.Model, res)
	case req.API == "responses":
		streamResponses(w, r, n, req.Model, res)
	case req.API == "anthropic" && !req.Stream:
		writeAnthropicWhole(w, n, req.Model, res)
	case req.API == "anthropic":
		streamAnthropic(w, r, n, req.Model, res)
	case !req.Stream:
		writeWhole(w, n, fmt.Sprintf("chatcmpl-scripted-%d", n), req.Model, res)
	default:
		stream(w, r, n, fmt.Sprintf("chatcmpl-scripted-%d", n), req.Model, res, req.IncludeUsage)
	}
}

// take checks req against the next step and moves past it.
func (p *Provider) take(req Request) (Step, int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reqs = append(p.reqs, req)
	n := p.next
	if n >= len(p.script.Steps) {
		if k := len(p.script.Steps) - 1; k >= 0 && p.script.Steps[k].Respond.Repeat {
			return p.script.Steps[k], n, nil
		}
		err := fmt.Errorf("scripted provider: script %q has %d steps; request %d has none", p.script.Name, len(p.script.Steps), n+1)
		p.errs = append(p.errs, err)
		return Step{}, n, err
	}
	st := p.script.Steps[n]
	if err := st.Expect.check(req); err != nil {
		err = fmt.Errorf("scripted provider: script %q step %d: %w", p.script.Name, n+1, err)
		p.errs = append(p.errs, err)
		return Step{}, n, err
	}
	p.next++
	return st, n, nil
}

func (e Expect) check(req Request) error {
	if e.Model != "" && req.Model != e.Model {
		return fmt.Errorf("want model %q, got %q", e.Model, req.Model)
	}
	for _, name := range e.Tools {
		found := false
		for _, t := range req.Tools {
			found = found || t == name
		}
		if !found {
			return fmt.Errorf("want tool %q offered", name)
		}
	}
	if e.LastRole == "" && len(e.LastContains) == 0 {
		return nil
	}
	if len(req.Messages) == 0 {
		return errors.New("want messages, got none")
	}
	last := req.Messages[len(req.Messages)-1]
	if e.LastRole != "" && last.Role != e.LastRole {
		return fmt.Errorf("want the last message's role %q, got %q", e.LastRole, last.Role)
	}
	text := last.Content
	for _, s := range e.LastContains {
		if !strings.Contains(text, s) {
			return fmt.Errorf("want the last message to contain %q, got %q", s, errdefs.Clip(text, 2000))
		}
	}
	return nil
}

// contentText is a message's content as text: a string, or the text parts of an array.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "param": nil, "code": nil}})
	_, _ = w.Write(b)
}
