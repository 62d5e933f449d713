package coder

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Message is one message of an OpenAI chat-completions conversation.
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// ToolCall is a call the model asked for; Arguments is JSON text as the model wrote it.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names a tool and holds its arguments.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Bounds on what the harness reads from a provider: a longer SSE line, or more text and
// arguments in one answer, is refused, so that a misbehaving provider cannot grow the
// harness's memory without end.
const (
	maxSSELine    = 1 << 20
	maxAnswer     = 4 << 20
	maxErrorBody  = 16 << 10
	maxToolCalls  = 64
	maxRetryCount = 3
)

// ProviderError is a completion that failed, classified so that the person watching is
// told which of the usual causes it was.
type ProviderError struct {
	// Kind is one of the Kind* constants.
	Kind string
	// Status is the HTTP status, when there was an answer.
	Status int
	// RetryAfter is the provider's Retry-After, when it sent one.
	RetryAfter time.Duration
	// Msg says what happened and what to do.
	Msg string
	err error
}

// Kinds of ProviderError.
const (
	KindRateLimited  = "rate_limited"  // 429 for the request rate: wait Retry-After
	KindOutOfBudget  = "out_of_budget" // 429 for the user's token budget: stop
	KindUnavailable  = "provider_unavailable"
	KindUnreachable  = "gateway_unreachable" // no answer at all from the base URL
	KindRefused      = "provider_refused"    // any other 4xx
	KindStreamCut    = "stream_cut"          // the answer ended before it finished
	KindStalled      = "stream_stalled"      // nothing arrived for the idle timeout
	KindBadStream    = "bad_stream"          // the answer could not be parsed
	KindProviderSaid = "provider_error"      // an error event inside the stream
)

func (e *ProviderError) Error() string { return e.Msg }
func (e *ProviderError) Unwrap() error { return e.err }

// chatRequest is the body of POST /chat/completions.
type chatRequest struct {
	Model         string         `json:"model"`
	Messages      []Message      `json:"messages"`
	Tools         []toolSpec     `json:"tools,omitempty"`
	Stream        bool           `json:"stream"`
	StreamOptions map[string]any `json:"stream_options,omitempty"`
}

type toolSpec struct {
	Type     string `json:"type"`
	Function Tool   `json:"function"`
}

// chunk is one streamed event of a chat completion.
type chunk struct {
	Choices []struct {
		Delta struct {
			Content   string `json:"content"`
			ToolCalls []struct {
				Index    *int   `json:"index"`
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// completer asks a model for the next message of a conversation, calling text with
// each piece of its text as it streams.
type completer interface {
	complete(ctx context.Context, msgs []Message, tools []Tool, text func(string)) (Message, error)
}

var (
	_ completer = (*client)(nil)
	_ completer = (*anthropicClient)(nil)
)

// client talks to an OpenAI-compatible chat-completions endpoint (the provider gateway).
type client struct {
	base, key, model string
	http             *http.Client
	idle             time.Duration // longest silence inside an answer
	tools            toolCache
}

// complete sends msgs and reads the streamed answer, calling text for each piece of text
// as it arrives. It returns the assistant's message whole.
func (c *client) complete(ctx context.Context, msgs []Message, tools []Tool, text func(string)) (Message, error) {
	body, err := json.Marshal(chatRequest{Model: c.model, Messages: msgs, Stream: true,
		StreamOptions: map[string]any{"include_usage": true}})
	if err != nil {
		return Message{}, fmt.Errorf("encoding the request: %w", err)
	}
	body = c.tools.add(body, tools, func(ts []Tool) any { return specs(ts) })
	ctx, cancel := context.WithCancelCause(ctx) // doStream's to call
	req, err := http.NewRequestWithContext(ctx, "POST", c.base+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		cancel(nil)
		return Message{}, fmt.Errorf("the provider's base URL %q: %w", c.base, errdefs.ErrInvalidArgument)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+c.key)
	return doStream(ctx, cancel, c.http, req, c.base, c.idle, func(r io.Reader) (Message, error) { return readStream(r, text) })
}

// toolCache holds a set of tools encoded as a request's "tools" member. The same tools go
// with every request of a turn, and encoding them (their JSON schemas, kilobytes) costs
// several times the rest of a short conversation's request.
type toolCache struct {
	tools []Tool
	enc   []byte
}

// add is body, a JSON object, with a "tools" member of tools as encode shapes them, or
// body itself when there are none.
func (tc *toolCache) add(body []byte, tools []Tool, encode func([]Tool) any) []byte {
	if len(tools) == 0 {
		return body
	}
	if tc.enc == nil || !slices.EqualFunc(tools, tc.tools, sameTool) {
		enc, err := json.Marshal(encode(tools))
		if err != nil {
			panic("encoding the tools: " + err.Error()) // Tools() are checked by a test
		}
		tc.tools, tc.enc = tools, enc
	}
	out := make([]byte, 0, len(body)+len(tc.enc)+10)
	out = append(out, body[:len(body)-1]...) // without its closing brace
	out = append(out, `,"tools":`...)
	out = append(out, tc.enc...)
	return append(out, '}')
}

func sameTool(a, b Tool) bool {
	return a.Name == b.Name && a.Description == b.Description && bytes.Equal(a.Parameters, b.Parameters)
}

// doStream sends req and reads its streamed answer with read, canceling it (cancel is
// ctx's, and doStream's to call) when nothing arrives for idle.
func doStream(ctx context.Context, cancel context.CancelCauseFunc, hc *http.Client, req *http.Request, base string, idle time.Duration,
	read func(io.Reader) (Message, error)) (Message, error) {
	watch := newIdleWatch(idle, func() { cancel(errStalled) })
	defer watch.stop()
	resp, err := hc.Do(req)
	if err != nil {
		defer cancel(nil)
		if errors.Is(context.Cause(ctx), errStalled) {
			return Message{}, stalled(idle)
		}
		if ctx.Err() != nil {
			return Message{}, ctx.Err()
		}
		return Message{}, &ProviderError{Kind: KindUnreachable, err: errdefs.ErrUnavailable,
			Msg: fmt.Sprintf("the provider gateway at %s did not answer (%s); is the gateway configured for this sandbox?", base, shortErr(err))}
	}
	if resp.StatusCode != http.StatusOK {
		defer cancel(nil)
		defer resp.Body.Close()
		return Message{}, statusError(resp)
	}
	m, err := read(&touchReader{r: resp.Body, touch: watch.touch, d: idle})
	if err != nil {
		defer cancel(nil)
		resp.Body.Close()
		if errors.Is(context.Cause(ctx), errStalled) {
			return Message{}, stalled(idle)
		}
		if ctx.Err() != nil {
			return Message{}, ctx.Err()
		}
		return Message{}, err
	}
	go drain(resp.Body, cancel)
	return m, nil
}

// drainWait bounds how long drain reads the end of a body.
const drainWait = 5 * time.Second

// drain reads the end of an answer's body (what follows its last event) off the turn's
// path, then closes it and cancels its request. A body read to its end puts its
// connection back in the pool; one closed early closes it. The end often comes late (the
// gateway records the answer's tokens before it ends the body): the next request then
// dials, and takes this connection instead if it is back first. A body that goes on is
// cut at 64 KiB or drainWait.
func drain(body io.ReadCloser, cancel context.CancelCauseFunc) {
	t := time.AfterFunc(drainWait, func() { cancel(nil) })
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	t.Stop()
	body.Close()
	cancel(nil)
}

// streamErr is the error of a stream that could not be read on: too long a line, or an
// end before it finished.
func streamErr(err error, events int) error {
	if errors.Is(err, errdefs.ErrLimitExceeded) {
		return &ProviderError{Kind: KindBadStream, err: err, Msg: "the provider's answer had a line longer than 1 MiB; the turn stopped"}
	}
	return cut(events)
}

func notJSON(data string) error {
	return &ProviderError{Kind: KindBadStream, err: errdefs.ErrInvalidArgument,
		Msg: fmt.Sprintf("the provider's answer held an event that is not JSON (%s); the turn stopped", errdefs.Clip(data, 80))}
}

var errStalled = errors.New("stalled")

func stalled(d time.Duration) error {
	return &ProviderError{Kind: KindStalled, err: errdefs.ErrDeadlineExceeded,
		Msg: fmt.Sprintf("the provider sent nothing for %s in the middle of an answer; the turn stopped. Send the message again to retry", d)}
}

// statusError classifies an answer that is not a 200.
func statusError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	msg := errorMessage(b)
	pe := &ProviderError{Status: resp.StatusCode, RetryAfter: retryAfter(resp.Header.Get("Retry-After"))}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests && outOfBudget(b, msg):
		pe.Kind, pe.err = KindOutOfBudget, errdefs.ErrLimitExceeded
		pe.Msg = "out of budget: " + msg
	case resp.StatusCode == http.StatusTooManyRequests:
		pe.Kind, pe.err = KindRateLimited, errdefs.ErrLimitExceeded
		pe.Msg = "rate limited: " + msg
	case resp.StatusCode >= 500:
		pe.Kind, pe.err = KindUnavailable, errdefs.ErrUnavailable
		pe.Msg = fmt.Sprintf("the provider is unavailable (HTTP %d): %s", resp.StatusCode, msg)
	default:
		pe.Kind, pe.err = KindRefused, errdefs.ErrFailedPrecondition
		pe.Msg = fmt.Sprintf("the provider refused the request (HTTP %d): %s", resp.StatusCode, msg)
	}
	return pe
}

// outOfBudget tells a spent budget from a request rate: OpenAI says insufficient_quota,
// the gateway names its tokens-per-day limit.
func outOfBudget(body []byte, msg string) bool {
	return bytes.Contains(body, []byte("insufficient_quota")) || strings.Contains(msg, "tokens per day")
}

// errorMessage is the message of an OpenAI- or Anthropic-shaped error body, or the start
// of the body when it has neither.
func errorMessage(b []byte) string {
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	var inner struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &e) == nil && json.Unmarshal(e.Error, &inner) == nil && inner.Message != "" {
		return errdefs.Clip(inner.Message, 1024)
	}
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "?"))
	if s == "" {
		return "no message"
	}
	return errdefs.Clip(s, 256)
}

// retryAfter reads Retry-After in seconds or as an HTTP date; 0 when absent or unreadable.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseFloat(v, 64); err == nil && n >= 0 && n < 1e6 {
		return time.Duration(n * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// readStream reads a chat-completions SSE stream to its [DONE] (or its last chunk with a
// finish_reason followed by the end of the body), assembling the assistant's message.
func readStream(r io.Reader, text func(string)) (Message, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	m := Message{Role: "assistant"}
	var calls []*ToolCall
	var content strings.Builder
	size, events := 0, 0
	finished := false
	for {
		line, err := readLine(br)
		if errors.Is(err, io.EOF) {
			if finished {
				break
			}
			return Message{}, cut(events)
		}
		if err != nil {
			return Message{}, streamErr(err, events)
		}
		data, ok := strings.CutPrefix(line, "data:")
		if !ok {
			continue // blank lines, comments, event: and id: fields
		}
		data = strings.TrimPrefix(data, " ")
		if data == "[DONE]" {
			break
		}
		events++
		var c chunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return Message{}, notJSON(data)
		}
		if c.Error != nil {
			return Message{}, &ProviderError{Kind: KindProviderSaid, err: errdefs.ErrUnavailable,
				Msg: "the provider broke off its answer: " + errdefs.Clip(c.Error.Message, 1024)}
		}
		for _, ch := range c.Choices {
			if ch.FinishReason != nil && *ch.FinishReason != "" {
				finished = true
			}
			if d := ch.Delta.Content; d != "" {
				content.WriteString(d)
				size += len(d)
				text(d)
			}
			for _, tc := range ch.Delta.ToolCalls {
				i := len(calls) - 1
				if tc.Index != nil {
					i = *tc.Index
				}
				if i < 0 || i >= maxToolCalls {
					return Message{}, &ProviderError{Kind: KindBadStream, err: errdefs.ErrInvalidArgument,
						Msg: fmt.Sprintf("the provider's answer had a tool call with index %d, outside 0 to %d; the turn stopped", i, maxToolCalls-1)}
				}
				for len(calls) <= i {
					calls = append(calls, &ToolCall{Type: "function"})
				}
				call := calls[i]
				if tc.ID != "" {
					call.ID = tc.ID
				}
				call.Function.Name += tc.Function.Name
				call.Function.Arguments += tc.Function.Arguments
				size += len(tc.Function.Name) + len(tc.Function.Arguments)
			}
		}
		if size > maxAnswer {
			return Message{}, &ProviderError{Kind: KindBadStream, err: errdefs.ErrLimitExceeded, Msg: "the provider's answer passed 4 MiB; the turn stopped"}
		}
	}
	m.Content = content.String()
	for i, c := range calls {
		if c.ID == "" {
			c.ID = fmt.Sprintf("call_%d", i)
		}
		m.ToolCalls = append(m.ToolCalls, *c)
	}
	return m, nil
}

func cut(events int) error {
	return &ProviderError{Kind: KindStreamCut, err: errdefs.ErrUnavailable,
		Msg: fmt.Sprintf("the provider's answer broke off after %d events, before it finished; nothing of it was kept. Send the message again to retry", events)}
}

// readLine reads one line without its end, refusing one longer than maxSSELine.
func readLine(br *bufio.Reader) (string, error) {
	var buf []byte
	for {
		part, isPrefix, err := br.ReadLine()
		if err != nil {
			if err == io.EOF && len(buf) > 0 {
				return string(buf), nil
			}
			return "", err
		}
		buf = append(buf, part...)
		if len(buf) > maxSSELine {
			return "", fmt.Errorf("SSE line over %d bytes: %w", maxSSELine, errdefs.ErrLimitExceeded)
		}
		if !isPrefix {
			return string(buf), nil
		}
	}
}

// shortErr is a transport error without the URL that net/http repeats.
func shortErr(err error) string {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) && ue.Unwrap() != nil {
		err = ue.Unwrap()
	}
	return errdefs.Clip(err.Error(), 200)
}

func specs(tools []Tool) []toolSpec {
	out := make([]toolSpec, len(tools))
	for i, t := range tools {
		out[i] = toolSpec{Type: "function", Function: t}
	}
	return out
}

// idleWatch calls fire when touch has not been called for d.
type idleWatch struct{ t *time.Timer }

func newIdleWatch(d time.Duration, fire func()) *idleWatch {
	if d <= 0 {
		return &idleWatch{}
	}
	return &idleWatch{t: time.AfterFunc(d, fire)}
}

func (w *idleWatch) touch(d time.Duration) {
	if w.t != nil {
		w.t.Reset(d)
	}
}

func (w *idleWatch) stop() {
	if w.t != nil {
		w.t.Stop()
	}
}

// touchReader touches its watch at every read that returned bytes.
type touchReader struct {
	r     io.Reader
	touch func(time.Duration)
	d     time.Duration
}

func (t *touchReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 && t.d > 0 {
		t.touch(t.d)
	}
	return n, err
}
