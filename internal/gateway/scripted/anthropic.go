package scripted

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// anthropicRequest is a messages request body.
type anthropicRequest struct {
	Model    string          `json:"model"`
	Stream   bool            `json:"stream"`
	System   json.RawMessage `json:"system"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Name string `json:"name"`
	} `json:"tools"`
}

// anthropicBlock is a content block of a request message.
type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`          // a tool_use's
	ToolUseID string          `json:"tool_use_id"` // a tool_result's
	Content   json.RawMessage `json:"content"`     // a tool_result's: a string or text blocks
}

// validate refuses what Anthropic's API refuses of a conversation's shape: roles that do
// not alternate from user, and tool_use blocks not answered by tool_result blocks with
// their IDs in the next message (or results that answer nothing).
func (a anthropicRequest) validate() error {
	var pending map[string]bool // the last assistant message's tool_use IDs
	for i, m := range a.Messages {
		want := "user"
		if i%2 == 1 {
			want = "assistant"
		}
		if m.Role != want {
			return fmt.Errorf("messages.%d: roles must alternate between \"user\" and \"assistant\", starting with \"user\"; got %q", i, m.Role)
		}
		var blocks []anthropicBlock
		_ = json.Unmarshal(m.Content, &blocks)
		answered := map[string]bool{}
		uses := map[string]bool{}
		for _, b := range blocks {
			switch {
			case b.Type == "tool_result" && !pending[b.ToolUseID]:
				return fmt.Errorf("messages.%d: unexpected tool_use_id %q in tool_result: it answers no tool_use of the previous message", i, b.ToolUseID)
			case b.Type == "tool_result":
				answered[b.ToolUseID] = true
			case b.Type == "tool_use":
				uses[b.ID] = true
			}
		}
		for id := range pending {
			if !answered[id] {
				return fmt.Errorf("messages.%d: tool_use %q has no tool_result right after it", i, id)
			}
		}
		pending = uses
	}
	return nil
}

func (a anthropicRequest) normal() Request {
	r := Request{API: "anthropic", Model: a.Model, Stream: a.Stream, IncludeUsage: true}
	if len(a.System) > 0 {
		r.Messages = append(r.Messages, RequestMessage{Role: "system", Content: contentText(a.System)})
	}
	for _, m := range a.Messages {
		role, text := m.Role, contentText(m.Content)
		var blocks []anthropicBlock
		if json.Unmarshal(m.Content, &blocks) == nil && len(blocks) > 0 {
			var b strings.Builder
			results := 0
			for _, bl := range blocks {
				switch bl.Type {
				case "text":
					b.WriteString(bl.Text)
				case "tool_result":
					results++
					b.WriteString(contentText(bl.Content))
					b.WriteString("\n")
				}
			}
			text = b.String()
			if role == "user" && results == len(blocks) {
				role = "tool"
			}
		}
		r.Messages = append(r.Messages, RequestMessage{Role: role, Content: text})
	}
	for _, t := range a.Tools {
		r.Tools = append(r.Tools, t.Name)
	}
	return r
}

// anthropicEvents are the answer's server-sent events, as Anthropic sends them.
func anthropicEvents(res Respond, n int, model string) []sseEvent {
	frag := res.Fragment
	if frag <= 0 {
		frag = 16
	}
	u := usageOf(res)
	evs := []sseEvent{{"message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": fmt.Sprintf("msg_scripted_%d", n), "type": "message", "role": "assistant", "model": model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": u.PromptTokens, "output_tokens": 1},
	}}}}
	block := 0
	if res.Content != "" {
		evs = append(evs, sseEvent{"content_block_start", map[string]any{"type": "content_block_start", "index": block,
			"content_block": map[string]any{"type": "text", "text": ""}}})
		for _, piece := range split(res.Content, frag) {
			evs = append(evs, sseEvent{"content_block_delta", map[string]any{"type": "content_block_delta", "index": block,
				"delta": map[string]any{"type": "text_delta", "text": piece}}})
		}
		evs = append(evs, sseEvent{"content_block_stop", map[string]any{"type": "content_block_stop", "index": block}})
		block++
	}
	for i, c := range res.ToolCalls {
		evs = append(evs, sseEvent{"content_block_start", map[string]any{"type": "content_block_start", "index": block,
			"content_block": map[string]any{"type": "tool_use", "id": anthropicID(c, n, i), "name": c.Name, "input": map[string]any{}}}})
		for _, piece := range split(arguments(c), frag) {
			evs = append(evs, sseEvent{"content_block_delta", map[string]any{"type": "content_block_delta", "index": block,
				"delta": map[string]any{"type": "input_json_delta", "partial_json": piece}}})
		}
		evs = append(evs, sseEvent{"content_block_stop", map[string]any{"type": "content_block_stop", "index": block}})
		block++
	}
	stop := "end_turn"
	if len(res.ToolCalls) > 0 {
		stop = "tool_use"
	}
	return append(evs,
		sseEvent{"message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
			"usage": map[string]any{"output_tokens": u.CompletionTokens}}},
		sseEvent{"message_stop", map[string]any{"type": "message_stop"}})
}

func anthropicID(c Call, n, i int) string {
	if c.ID != "" {
		return c.ID
	}
	return fmt.Sprintf("toolu_%d_%d", n, i)
}

type sseEvent struct {
	name string
	data any
}

// streamAnthropic writes res as Anthropic's server-sent events, flushing each.
func streamAnthropic(w http.ResponseWriter, r *http.Request, n int, model string, res Respond) {
	f, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	for i, ev := range anthropicEvents(res, n, model) {
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

// writeAnthropicWhole answers a request without stream: one message object.
func writeAnthropicWhole(w http.ResponseWriter, n int, model string, res Respond) {
	var content []any
	if res.Content != "" {
		content = append(content, map[string]any{"type": "text", "text": res.Content})
	}
	stop := "end_turn"
	for i, c := range res.ToolCalls {
		content = append(content, map[string]any{"type": "tool_use", "id": anthropicID(c, n, i), "name": c.Name, "input": json.RawMessage(arguments(c))})
		stop = "tool_use"
	}
	u := usageOf(res)
	b, err := json.Marshal(map[string]any{
		"id": fmt.Sprintf("msg_scripted_%d", n), "type": "message", "role": "assistant", "model": model,
		"content": content, "stop_reason": stop, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": u.PromptTokens, "output_tokens": u.CompletionTokens},
	})
	if err != nil { // arguments_raw that is not JSON cannot be an input object
		writeError(w, http.StatusInternalServerError, "scripted provider: a whole Anthropic answer needs tool arguments that are JSON")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
