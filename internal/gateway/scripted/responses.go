package scripted

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// responsesRequest is a Responses API request body (POST /v1/responses).
type responsesRequest struct {
	Model         string          `json:"model"`
	Stream        bool            `json:"stream"`
	Instructions  string          `json:"instructions"`
	Input         json.RawMessage `json:"input"`
	StreamOptions json.RawMessage `json:"stream_options"`
	Tools         []struct {
		Type string `json:"type"`
		Name string `json:"name"`
	} `json:"tools"`
}

// responsesItem is an item of a request's input.
type responsesItem struct {
	Type    string          `json:"type"` // "message" when absent
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"` // a message's: a string or parts with text
	CallID  string          `json:"call_id"` // a function_call's and its output's
	Name    string          `json:"name"`
	Output  json.RawMessage `json:"output"` // a function_call_output's: a string or parts
}

// items are the request's input: a string is one user message.
func (q responsesRequest) items() ([]responsesItem, error) {
	if len(q.Input) == 0 || string(q.Input) == "null" {
		return nil, fmt.Errorf("missing required parameter: 'input'")
	}
	var s string
	if json.Unmarshal(q.Input, &s) == nil {
		return []responsesItem{{Type: "message", Role: "user", Content: q.Input}}, nil
	}
	var items []responsesItem
	if err := json.Unmarshal(q.Input, &items); err != nil {
		return nil, fmt.Errorf("invalid type for 'input': expected a string or an array of input items")
	}
	return items, nil
}

// validate refuses what the Responses API refuses: stream_options other than
// include_obfuscation (include_usage is chat completions'), and a tool call's output
// whose call_id no earlier call in the input has.
func (q responsesRequest) validate() error {
	if len(q.StreamOptions) > 0 && string(q.StreamOptions) != "null" {
		var opts map[string]json.RawMessage
		if err := json.Unmarshal(q.StreamOptions, &opts); err != nil {
			return fmt.Errorf("invalid type for 'stream_options': expected an object")
		}
		for k := range opts {
			if k != "include_obfuscation" {
				return fmt.Errorf("unknown parameter: 'stream_options.%s'", k)
			}
		}
	}
	items, err := q.items()
	if err != nil {
		return err
	}
	calls := map[string]bool{}
	for _, it := range items {
		switch it.Type {
		case "function_call", "custom_tool_call", "local_shell_call":
			calls[it.CallID] = true
		case "function_call_output", "custom_tool_call_output", "local_shell_call_output":
			if !calls[it.CallID] {
				return fmt.Errorf("no tool call found for function call output with call_id %s", it.CallID)
			}
		}
	}
	return nil
}

func (q responsesRequest) normal() Request {
	r := Request{API: "responses", Model: q.Model, Stream: q.Stream, IncludeUsage: true}
	if q.Instructions != "" {
		r.Messages = append(r.Messages, RequestMessage{Role: "system", Content: q.Instructions})
	}
	items, _ := q.items()
	for _, it := range items {
		switch it.Type {
		case "", "message":
			r.Messages = append(r.Messages, RequestMessage{Role: it.Role, Content: contentText(it.Content)})
		case "function_call", "custom_tool_call":
			r.Messages = append(r.Messages, RequestMessage{Role: "assistant", Content: ""})
		case "function_call_output", "custom_tool_call_output":
			r.Messages = append(r.Messages, RequestMessage{Role: "tool", Content: contentText(it.Output)})
		}
	}
	for _, t := range q.Tools {
		name := t.Name
		if name == "" {
			name = t.Type // a built-in tool: web_search, local_shell, …
		}
		r.Tools = append(r.Tools, name)
	}
	return r
}

// responseObject is the Responses API's response object, as response.created and
// response.completed carry it and a request without stream answers it.
func responseObject(n int, model, status string, created int64, output []any, usage *Usage) map[string]any {
	o := map[string]any{
		"id": fmt.Sprintf("resp_scripted_%d", n), "object": "response", "created_at": created,
		"status": status, "model": model, "output": output, "parallel_tool_calls": true,
		"tool_choice": "auto", "tools": []any{}, "error": nil, "incomplete_details": nil, "usage": nil,
	}
	if usage != nil {
		o["usage"] = map[string]any{
			"input_tokens": usage.PromptTokens, "input_tokens_details": map[string]any{"cached_tokens": 0},
			"output_tokens": usage.CompletionTokens, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
			"total_tokens": usage.TotalTokens,
		}
	}
	return o
}

// responsesOutput are the answer's output items when complete: a message with the text,
// then a function_call per tool call.
func responsesOutput(res Respond, n int) []any {
	out := []any{}
	if res.Content != "" {
		out = append(out, messageItem(n, "completed", res.Content))
	}
	for i, c := range res.ToolCalls {
		out = append(out, functionCallItem(c, n, i, "completed", arguments(c)))
	}
	return out
}

func messageItem(n int, status, text string) map[string]any {
	content := []any{}
	if status == "completed" {
		content = append(content, outputText(text))
	}
	return map[string]any{"id": fmt.Sprintf("msg_scripted_%d", n), "type": "message", "status": status, "role": "assistant", "content": content}
}

func outputText(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
}

func functionCallItem(c Call, n, i int, status, args string) map[string]any {
	return map[string]any{"id": fmt.Sprintf("fc_scripted_%d_%d", n, i), "type": "function_call", "status": status,
		"call_id": callID(c, n, i), "name": c.Name, "arguments": args}
}

// responsesEvents are the answer's server-sent events, in the order OpenAI sends them:
// response.created and response.in_progress; for the text, its message item added, its
// content part added, the text in output_text.delta fragments, output_text.done,
// content_part.done and output_item.done; for each tool call, its function_call item
// added, its arguments in function_call_arguments.delta fragments, .done, and the item
// done; then response.completed with the whole output and the usage.
func responsesEvents(res Respond, n int, model string) []sseEvent {
	frag := res.Fragment
	if frag <= 0 {
		frag = 16
	}
	created := time.Now().Unix()
	var evs []sseEvent
	add := func(typ string, fields map[string]any) {
		fields["type"] = typ
		fields["sequence_number"] = len(evs)
		evs = append(evs, sseEvent{name: typ, data: fields})
	}
	add("response.created", map[string]any{"response": responseObject(n, model, "in_progress", created, []any{}, nil)})
	add("response.in_progress", map[string]any{"response": responseObject(n, model, "in_progress", created, []any{}, nil)})
	index := 0
	if res.Content != "" {
		id := fmt.Sprintf("msg_scripted_%d", n)
		add("response.output_item.added", map[string]any{"output_index": index, "item": messageItem(n, "in_progress", "")})
		add("response.content_part.added", map[string]any{"item_id": id, "output_index": index, "content_index": 0,
			"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
		for _, piece := range split(res.Content, frag) {
			add("response.output_text.delta", map[string]any{"item_id": id, "output_index": index, "content_index": 0, "delta": piece, "logprobs": []any{}})
		}
		add("response.output_text.done", map[string]any{"item_id": id, "output_index": index, "content_index": 0, "text": res.Content, "logprobs": []any{}})
		add("response.content_part.done", map[string]any{"item_id": id, "output_index": index, "content_index": 0,
			"part": map[string]any{"type": "output_text", "text": res.Content, "annotations": []any{}}})
		add("response.output_item.done", map[string]any{"output_index": index, "item": messageItem(n, "completed", res.Content)})
		index++
	}
	for i, c := range res.ToolCalls {
		id := fmt.Sprintf("fc_scripted_%d_%d", n, i)
		args := arguments(c)
		add("response.output_item.added", map[string]any{"output_index": index, "item": functionCallItem(c, n, i, "in_progress", "")})
		for _, piece := range split(args, frag) {
			add("response.function_call_arguments.delta", map[string]any{"item_id": id, "output_index": index, "delta": piece})
		}
		add("response.function_call_arguments.done", map[string]any{"item_id": id, "output_index": index, "name": c.Name, "arguments": args})
		add("response.output_item.done", map[string]any{"output_index": index, "item": functionCallItem(c, n, i, "completed", args)})
		index++
	}
	add("response.completed", map[string]any{"response": responseObject(n, model, "completed", created, responsesOutput(res, n), usageOf(res))})
	return evs
}

// streamResponses writes res as the Responses API's server-sent events, flushing each.
// The stream has no [DONE]: response.completed ends it.
func streamResponses(w http.ResponseWriter, r *http.Request, n int, model string, res Respond) {
	f, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	for i, ev := range responsesEvents(res, n, model) {
		if res.CutAfter > 0 && i == res.CutAfter {
			cut(w)
			return
		}
		b, _ := json.Marshal(ev.data)
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.name, b); err != nil {
			return
		}
		if f != nil {
			f.Flush()
		}
		if i == 0 && res.StallMS > 0 {
			select {
			case <-time.After(time.Duration(res.StallMS) * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
	}
}

// writeResponsesWhole answers a request without stream: one response object.
func writeResponsesWhole(w http.ResponseWriter, n int, model string, res Respond) {
	b, _ := json.Marshal(responseObject(n, model, "completed", time.Now().Unix(), responsesOutput(res, n), usageOf(res)))
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// writeResponsesError answers 400 as the Responses API does, its message naming what
// was wrong.
func writeResponsesError(w http.ResponseWriter, msg string) {
	code := "invalid_request"
	if strings.HasPrefix(msg, "unknown parameter") {
		code = "unknown_parameter"
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": "scripted provider: " + msg, "type": "invalid_request_error", "param": nil, "code": code}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write(b)
}
