package scripted

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// The chat.completion.chunk object, as OpenAI streams it.
type chunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	Usage   *Usage        `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int     `json:"index"`
	Delta        delta   `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

type delta struct {
	Role      string          `json:"role,omitempty"`
	Content   *string         `json:"content,omitempty"`
	ToolCalls []toolCallDelta `json:"tool_calls,omitempty"`
}

type toolCallDelta struct {
	Index    int           `json:"index"`
	ID       string        `json:"id,omitempty"`
	Type     string        `json:"type,omitempty"`
	Function functionDelta `json:"function"`
}

type functionDelta struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// callID is the ID of call i of an answer: the script's, or one made up.
func callID(c Call, n, i int) string {
	if c.ID != "" {
		return c.ID
	}
	return fmt.Sprintf("call_%d_%d", n, i)
}

// arguments is the JSON text of c's arguments.
func arguments(c Call) string {
	if c.ArgumentsRaw != nil {
		return *c.ArgumentsRaw
	}
	if len(c.Arguments) == 0 {
		return "{}"
	}
	return string(c.Arguments)
}

// deltas are the answer's events, in the order OpenAI sends them: the role, the text in
// fragments, each tool call's header and then its arguments in fragments, the finish.
func deltas(res Respond, n int) []chunkChoice {
	frag := res.Fragment
	if frag <= 0 {
		frag = 16
	}
	empty := ""
	out := []chunkChoice{{Delta: delta{Role: "assistant", Content: &empty}}}
	for _, piece := range split(res.Content, frag) {
		out = append(out, chunkChoice{Delta: delta{Content: &piece}})
	}
	for i, c := range res.ToolCalls {
		out = append(out, chunkChoice{Delta: delta{ToolCalls: []toolCallDelta{{
			Index: i, ID: callID(c, n, i), Type: "function", Function: functionDelta{Name: c.Name},
		}}}})
		for _, piece := range split(arguments(c), frag) {
			out = append(out, chunkChoice{Delta: delta{ToolCalls: []toolCallDelta{{Index: i, Function: functionDelta{Arguments: piece}}}}})
		}
	}
	finish := "stop"
	if len(res.ToolCalls) > 0 {
		finish = "tool_calls"
	}
	return append(out, chunkChoice{FinishReason: &finish})
}

// split cuts s into pieces of at most n bytes (n > 0), not inside a UTF-8 sequence.
func split(s string, n int) []string {
	var out []string
	for len(s) > 0 {
		k := min(n, len(s))
		for k < len(s) && k > 0 && s[k]&0xC0 == 0x80 {
			k--
		}
		if k == 0 {
			k = min(n, len(s))
		}
		out = append(out, s[:k])
		s = s[k:]
	}
	return out
}

func usageOf(res Respond) *Usage {
	u := Usage{PromptTokens: 10, CompletionTokens: 5}
	if res.Usage != nil {
		u = *res.Usage
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return &u
}

// stream writes res as server-sent events, flushing each.
func stream(w http.ResponseWriter, r *http.Request, n int, id, model string, res Respond, withUsage bool) {
	f, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	created := time.Now().Unix()
	events := 0
	send := func(c chunk) bool {
		if res.CutAfter > 0 && events == res.CutAfter {
			return false
		}
		b, _ := json.Marshal(c)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		if f != nil {
			f.Flush()
		}
		events++
		if events == 1 && res.StallMS > 0 {
			select {
			case <-time.After(time.Duration(res.StallMS) * time.Millisecond):
			case <-r.Context().Done():
				return false
			}
		}
		return true
	}
	for _, ch := range deltas(res, n) {
		if !send(chunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model, Choices: []chunkChoice{ch}}) {
			cut(w)
			return
		}
	}
	if withUsage && !send(chunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model, Choices: []chunkChoice{}, Usage: usageOf(res)}) {
		cut(w)
		return
	}
	if res.CutAfter > 0 && events == res.CutAfter {
		cut(w)
		return
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if f != nil {
		f.Flush()
	}
}

// cut ends the response without its end: the connection is closed under it.
func cut(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			c.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// writeWhole answers a request without stream: one chat.completion object.
func writeWhole(w http.ResponseWriter, n int, id, model string, res Respond) {
	type call struct {
		ID       string        `json:"id"`
		Type     string        `json:"type"`
		Function functionDelta `json:"function"`
	}
	msg := map[string]any{"role": "assistant", "content": res.Content}
	finish := "stop"
	if len(res.ToolCalls) > 0 {
		var calls []call
		for i, c := range res.ToolCalls {
			calls = append(calls, call{ID: callID(c, n, i), Type: "function", Function: functionDelta{Name: c.Name, Arguments: arguments(c)}})
		}
		msg["tool_calls"] = calls
		finish = "tool_calls"
		if res.Content == "" {
			msg["content"] = nil
		}
	}
	b, _ := json.Marshal(map[string]any{
		"id": id, "object": "chat.completion", "created": time.Now().Unix(), "model": model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   usageOf(res),
	})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
