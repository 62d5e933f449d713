package scripted_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/paddockhq/paddock/internal/gateway/scripted"
)

const script = `{
  "name": "wire",
  "steps": [
    {"expect": {"model": "m1", "last_role": "user", "last_contains": ["hi"], "tools": ["read_file"]},
     "respond": {"content": "héllo wörld, a longer text", "fragment": 3,
                 "tool_calls": [{"id": "call_a", "name": "read_file", "arguments": {"path": "a.txt"}},
                                {"name": "list_files", "arguments_raw": "{\"depth\": 2}"}],
                 "usage": {"prompt_tokens": 7, "completion_tokens": 3}}},
    {"expect": {"last_role": "tool"}, "respond": {"content": "whole", "tool_calls": [{"name": "undo"}]}},
    {"expect": {"last_role": "user", "last_contains": ["never"]}, "respond": {"content": "x"}}
  ]
}`

func start(t *testing.T, src string) (*scripted.Provider, *openai.Client) {
	t.Helper()
	s, err := scripted.Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	p := scripted.New(s)
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	cfg := openai.DefaultConfig("key")
	cfg.BaseURL = srv.URL + "/v1"
	return p, openai.NewClientWithConfig(cfg)
}

var readFile = openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "read_file", Parameters: map[string]any{"type": "object"}}}

// A widely used OpenAI client reads the scripted stream as it reads OpenAI's: text and
// tool calls from deltas, the finish reason and the usage; then the same in one answer.
func TestWireFormat(t *testing.T) {
	p, c := start(t, script)
	ctx := context.Background()
	st, err := c.CreateChatCompletionStream(ctx, openai.ChatCompletionRequest{
		Model: "m1", Stream: true, StreamOptions: &openai.StreamOptions{IncludeUsage: true}, Tools: []openai.Tool{readFile},
		Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "hi there"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	var calls []openai.ToolCall
	var finish openai.FinishReason
	var usage *openai.Usage
	events := 0
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		events++
		if r.Usage != nil {
			usage = r.Usage
		}
		for _, ch := range r.Choices {
			text.WriteString(ch.Delta.Content)
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
			for _, tc := range ch.Delta.ToolCalls {
				i := *tc.Index
				for len(calls) <= i {
					calls = append(calls, openai.ToolCall{})
				}
				if tc.ID != "" {
					calls[i].ID, calls[i].Type = tc.ID, tc.Type
				}
				calls[i].Function.Name += tc.Function.Name
				calls[i].Function.Arguments += tc.Function.Arguments
			}
		}
	}
	st.Close()
	if text.String() != "héllo wörld, a longer text" || finish != openai.FinishReasonToolCalls || events < 10 {
		t.Errorf("text %q, finish %q, %d events", text.String(), finish, events)
	}
	if len(calls) != 2 || calls[0].ID != "call_a" || calls[0].Type != "function" || calls[0].Function.Name != "read_file" ||
		calls[0].Function.Arguments != `{"path": "a.txt"}` || calls[1].ID == "" || calls[1].Function.Arguments != `{"depth": 2}` {
		t.Errorf("tool calls %+v", calls)
	}
	if usage == nil || usage.PromptTokens != 7 || usage.CompletionTokens != 3 || usage.TotalTokens != 10 {
		t.Errorf("usage %+v", usage)
	}

	res, err := c.CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: "m1",
		Messages: []openai.ChatCompletionMessage{{Role: "tool", Content: "a", ToolCallID: "call_a"}}})
	if err != nil {
		t.Fatal(err)
	}
	if m := res.Choices[0].Message; m.Content != "whole" || len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "undo" ||
		m.ToolCalls[0].Function.Arguments != "{}" || res.Choices[0].FinishReason != openai.FinishReasonToolCalls {
		t.Errorf("whole answer %+v", res)
	}

	// A request that departs from the script is answered 400 saying how, and recorded.
	_, err = c.CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: "m1",
		Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "something else"}}})
	var apiErr *openai.APIError
	if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 400 || !strings.Contains(apiErr.Message, `step 3: want the last message to contain "never"`) {
		t.Errorf("a departure from the script: %v", err)
	}
	if p.Err() == nil || p.Done() || len(p.Requests()) != 3 {
		t.Errorf("Err %v, Done %v, %d requests", p.Err(), p.Done(), len(p.Requests()))
	}
}

// A cut stream ends without [DONE], as a dropped connection does; an error status comes
// with its headers.
func TestFaults(t *testing.T) {
	_, c := start(t, `{"steps": [
	  {"respond": {"content": "abcdefghijklmnop", "fragment": 2, "cut_after": 3}},
	  {"respond": {"status": 429, "headers": {"Retry-After": "7"}, "body": {"error": {"message": "slow down", "type": "requests"}}}}
	]}`)
	ctx := context.Background()
	req := openai.ChatCompletionRequest{Model: "m", Stream: true, Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "x"}}}
	st, err := c.CreateChatCompletionStream(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for {
		_, err = st.Recv()
		if err != nil {
			break
		}
		got++
	}
	st.Close()
	if got != 3 || errors.Is(err, io.EOF) {
		t.Errorf("read %d events then %v, want 3 then a broken stream", got, err)
	}
	_, err = c.CreateChatCompletionStream(ctx, req)
	var apiErr *openai.APIError
	if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != http.StatusTooManyRequests || apiErr.Message != "slow down" {
		t.Errorf("429: %v", err)
	}
}

func TestParseRefusesTypos(t *testing.T) {
	for _, src := range []string{
		`{"steps": [{"respond": {"contnet": "x"}}]}`,
		`{"steps": [{"respond": {"tool_calls": [{"arguments": {}}]}}]}`,
		`{"steps": [`,
	} {
		if _, err := scripted.Parse([]byte(src)); err == nil {
			t.Errorf("Parse(%s) accepted it", src)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(script))
	f.Add([]byte(`{"steps":[{"respond":{"status":429}}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := scripted.Parse(b)
		if err != nil {
			return
		}
		for i := range s.Steps { // no waits and no cuts: a recorder cannot be cut
			s.Steps[i].Respond.DelayMS, s.Steps[i].Respond.StallMS, s.Steps[i].Respond.CutAfter = 0, 0, 0
		}
		p := scripted.New(s)
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`)))
	})
}
