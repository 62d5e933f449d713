package scripted_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/paddockhq/paddock/internal/gateway"
	"github.com/paddockhq/paddock/internal/gateway/scripted"
)

const responsesScript = `{"steps": [
  {"expect": {"model": "m1", "last_role": "user", "last_contains": ["make it blue"], "tools": ["exec_command"]},
   "respond": {"content": "Looking.", "fragment": 3,
               "tool_calls": [{"id": "call_a", "name": "exec_command", "arguments": {"cmd": "cat index.html"}}],
               "usage": {"prompt_tokens": 7, "completion_tokens": 3}}},
  {"expect": {"last_role": "tool", "last_contains": ["<h1>red</h1>"]},
   "respond": {"content": "It is red.", "usage": {"prompt_tokens": 20, "completion_tokens": 4}}}
]}`

// startResponses serves the scripted provider behind the real gateway, which gives each
// user tokensPerDay tokens, and returns the official OpenAI SDK's client of the gateway
// and the usage the gateway counted.
func startResponses(t *testing.T, src string, tokensPerDay int64) (*scripted.Provider, openai.Client, func() []gateway.Usage) {
	t.Helper()
	s, err := scripted.Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	p := scripted.New(s)
	up := httptest.NewServer(p)
	t.Cleanup(up.Close)
	var mu sync.Mutex
	var counted []gateway.Usage
	g, err := gateway.New(gateway.Config{Providers: []gateway.Provider{
		{Name: "openai", Kind: gateway.KindOpenAI, BaseURL: up.URL, APIKey: "sk-platform", TokensPerDay: tokensPerDay},
	}}, gateway.Options{Log: slog.New(slog.DiscardHandler), Usage: func(_ context.Context, u gateway.Usage) {
		mu.Lock()
		counted = append(counted, u)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	caller := gateway.Caller{UserID: "u1", SandboxID: "sb1"}
	front := httptest.NewServer(http.StripPrefix("/gateway", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.ServeHTTP(w, r.WithContext(gateway.WithCaller(r.Context(), caller)))
	})))
	t.Cleanup(front.Close)
	c := openai.NewClient(option.WithBaseURL(front.URL+"/gateway/openai/v1"), option.WithAPIKey("sandbox-placeholder"), option.WithMaxRetries(0))
	return p, c, func() []gateway.Usage {
		mu.Lock()
		defer mu.Unlock()
		return append([]gateway.Usage(nil), counted...)
	}
}

var execTool = responses.ToolParamOfFunction("exec_command", map[string]any{"type": "object", "properties": map[string]any{"cmd": map[string]any{"type": "string"}}}, false)

// The official OpenAI SDK reads the scripted Responses stream, through the gateway, as it
// reads OpenAI's: the events in order with their sequence numbers, the text and the
// function call's arguments from their deltas, the output and usage of
// response.completed; the gateway counts that usage and holds the user to the budget.
func TestResponsesStream(t *testing.T) {
	p, c, counted := startResponses(t, responsesScript, 34)
	ctx := context.Background()
	st := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model: "m1", Instructions: openai.String("be brief"), Tools: []responses.ToolUnionParam{execTool},
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("make it blue")},
	})
	var types []string
	var text, args strings.Builder
	var doneArgs, callName string
	var completed responses.Response
	for st.Next() {
		ev := st.Current()
		if int(ev.SequenceNumber) != len(types) {
			t.Errorf("event %d (%s) has sequence_number %d", len(types), ev.Type, ev.SequenceNumber)
		}
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.AsResponseOutputTextDelta().Delta)
		case "response.function_call_arguments.delta":
			args.WriteString(ev.AsResponseFunctionCallArgumentsDelta().Delta)
		case "response.function_call_arguments.done":
			doneArgs = ev.AsResponseFunctionCallArgumentsDone().Arguments
		case "response.output_item.added":
			if it := ev.AsResponseOutputItemAdded().Item; it.Type == "function_call" {
				callName = it.Name
			}
		case "response.completed":
			completed = ev.AsResponseCompleted().Response
		}
	}
	if err := st.Err(); err != nil {
		t.Fatalf("the stream: %v (script: %v)", err, p.Err())
	}
	want := []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.delta", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added"}
	for range (len(`{"cmd": "cat index.html"}`) + 2) / 3 {
		want = append(want, "response.function_call_arguments.delta")
	}
	want = append(want, "response.function_call_arguments.done", "response.output_item.done", "response.completed")
	if strings.Join(types, " ") != strings.Join(want, " ") {
		t.Errorf("events\n got %v\nwant %v", types, want)
	}
	if text.String() != "Looking." || args.String() != `{"cmd": "cat index.html"}` || doneArgs != args.String() || callName != "exec_command" {
		t.Errorf("text %q, arguments %q (done %q), call %q", text.String(), args.String(), doneArgs, callName)
	}
	if completed.Status != "completed" || completed.Usage.InputTokens != 7 || completed.Usage.OutputTokens != 3 || completed.Usage.TotalTokens != 10 ||
		len(completed.Output) != 2 || completed.Output[1].CallID != "call_a" || completed.OutputText() != "Looking." {
		t.Errorf("response.completed: %+v", completed)
	}
	if got := counted(); len(got) != 1 || got[0].InputTokens != 7 || got[0].OutputTokens != 3 {
		t.Errorf("the gateway counted %+v, want 7 in and 3 out", got)
	}

	// The tool's result goes back as a function_call_output; an answer without stream is
	// one response object.
	call := responses.ResponseInputItemParamOfFunctionCall(`{"cmd":"cat index.html"}`, "call_a", "exec_command")
	out := responses.ResponseInputItemParamOfFunctionCallOutput("<h1>red</h1>")
	out.OfFunctionCallOutput.CallID = openai.String("call_a")
	r, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "m1", Tools: []responses.ToolUnionParam{execTool},
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("make it blue", responses.EasyInputMessageRoleUser), call, out}}})
	if err != nil || r.OutputText() != "It is red." || r.Usage.TotalTokens != 24 {
		t.Fatalf("the second answer: %v %+v (script: %v)", err, r, p.Err())
	}
	if err := p.Err(); err != nil || !p.Done() {
		t.Errorf("the script: %v (done %v)", err, p.Done())
	}

	// All the user's 34 tokens are spent: the next request waits for tomorrow.
	_, err = c.Responses.New(ctx, responses.ResponseNewParams{Model: "m1", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("more")}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || !strings.Contains(apiErr.Message, "budget") {
		t.Errorf("a request past the budget: %v %+v", err, apiErr)
	}
}

// The provider refuses what OpenAI's Responses API refuses: stream options that are chat
// completions' (include_usage), and a function call's output that answers no call.
func TestResponsesRefusals(t *testing.T) {
	s, _ := scripted.Parse([]byte(`{"steps": [{"respond": {"content": "x", "repeat": true}}]}`))
	up := httptest.NewServer(scripted.New(s))
	defer up.Close()
	for _, tc := range []struct{ body, want string }{
		{`{"model":"m","stream":true,"input":"hi","stream_options":{"include_usage":true}}`, "unknown parameter: 'stream_options.include_usage'"},
		{`{"model":"m","input":[{"type":"function_call_output","call_id":"call_x","output":"1"}]}`, "no tool call found for function call output with call_id call_x"},
		{`{"model":"m"}`, "missing required parameter: 'input'"},
	} {
		res, err := http.Post(up.URL+"/v1/responses", "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), tc.want) {
			t.Errorf("%s: %d %s, want 400 saying %q", tc.body, res.StatusCode, b, tc.want)
		}
	}
}

// Any body to /v1/responses gets an answer, never a panic: a 400 naming what was wrong,
// or the script's answer.
func FuzzResponsesRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","stream":true,"input":"hi"}`))
	f.Add([]byte(`{"model":"m","input":[{"type":"function_call","call_id":"c","name":"x","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"1"}]}]}`))
	f.Add([]byte(`{"input":[{"role":"user","content":[{"type":"input_text","text":"a"}]}],"stream_options":{"include_obfuscation":false},"tools":[{"type":"web_search"}]}`))
	s, _ := scripted.Parse([]byte(`{"steps": [{"respond": {"content": "x", "tool_calls": [{"name": "t"}], "repeat": true}}]}`))
	p := scripted.New(s)
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/responses", strings.NewReader(string(body))))
		if rec.Code != http.StatusOK && rec.Code != http.StatusBadRequest {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	})
}
