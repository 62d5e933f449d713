package coder

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// anthropicVersion is the Messages API version the harness speaks.
const anthropicVersion = "2023-06-01"

// anthropicMaxTokens bounds one answer.
const anthropicMaxTokens = 8192

// anthropicClient talks to an Anthropic Messages endpoint (the provider gateway). The
// conversation stays in chat-completions form; it is translated on the way out.
type anthropicClient struct {
	base, key, model string
	http             *http.Client
	idle             time.Duration
	tools            toolCache
}

type anthropicMessage struct {
	Role    string `json:"role"`
	Content []any  `json:"content"`
}

type anthropicTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// toAnthropic translates a conversation: the system message apart, tool calls as
// tool_use blocks, tool results as a user message of tool_result blocks, and adjacent
// messages of one role merged, as the API requires.
func toAnthropic(msgs []Message) (system string, out []anthropicMessage) {
	for _, m := range msgs {
		var role string
		var blocks []any
		switch m.Role {
		case "system":
			system += m.Content
			continue
		case "tool":
			role = "user"
			blocks = []any{map[string]any{"type": "tool_result", "tool_use_id": m.ToolCallID, "content": m.Content}}
		case "assistant":
			role = "assistant"
			if m.Content != "" {
				blocks = append(blocks, map[string]any{"type": "text", "text": m.Content})
			}
			for _, tc := range m.ToolCalls {
				blocks = append(blocks, map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Function.Name, "input": inputObject(tc.Function.Arguments)})
			}
			if len(blocks) == 0 {
				blocks = []any{map[string]any{"type": "text", "text": "(no answer)"}}
			}
		default:
			role = "user"
			blocks = []any{map[string]any{"type": "text", "text": m.Content}}
		}
		if n := len(out); n > 0 && out[n-1].Role == role {
			out[n-1].Content = append(out[n-1].Content, blocks...)
			continue
		}
		out = append(out, anthropicMessage{Role: role, Content: blocks})
	}
	return system, out
}

// inputObject is a tool call's arguments as the JSON object Anthropic wants; arguments
// that are not one (the model's mistake, already answered) become {}.
func inputObject(args string) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(args), &obj) != nil || obj == nil {
		return json.RawMessage("{}")
	}
	return json.RawMessage(args)
}

func (c *anthropicClient) complete(ctx context.Context, msgs []Message, tools []Tool, text func(string)) (Message, error) {
	system, am := toAnthropic(msgs)
	body, err := json.Marshal(map[string]any{"model": c.model, "max_tokens": anthropicMaxTokens, "system": system,
		"messages": am, "stream": true})
	if err != nil {
		return Message{}, fmt.Errorf("encoding the request: %w", err)
	}
	body = c.tools.add(body, tools, func(tools []Tool) any {
		ts := make([]anthropicTool, len(tools))
		for i, t := range tools {
			ts[i] = anthropicTool{Name: t.Name, Description: t.Description, InputSchema: t.Parameters}
		}
		return ts
	})
	ctx, cancel := context.WithCancelCause(ctx) // doStream's to call
	req, err := http.NewRequestWithContext(ctx, "POST", c.base+"/v1/messages", bytes.NewReader(body))
	if err != nil {
		cancel(nil)
		return Message{}, fmt.Errorf("the provider's base URL %q: %w", c.base, errdefs.ErrInvalidArgument)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("X-Api-Key", c.key)
	req.Header.Set("Anthropic-Version", anthropicVersion)
	return doStream(ctx, cancel, c.http, req, c.base, c.idle, func(r io.Reader) (Message, error) { return readAnthropicStream(r, text) })
}

// anthropicEvent is one streamed event of a message.
type anthropicEvent struct {
	Type         string `json:"type"`
	Index        int    `json:"index"`
	ContentBlock struct {
		Type string `json:"type"`
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"content_block"`
	Delta struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		PartialJSON string `json:"partial_json"`
		StopReason  string `json:"stop_reason"`
	} `json:"delta"`
	Error *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// readAnthropicStream reads a Messages SSE stream to its message_stop.
func readAnthropicStream(r io.Reader, text func(string)) (Message, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var content strings.Builder
	calls := map[int]*ToolCall{}
	var order []int
	size, events := 0, 0
	for {
		line, err := readLine(br)
		if err != nil {
			return Message{}, streamErr(err, events)
		}
		data, ok := strings.CutPrefix(line, "data:")
		if !ok {
			continue
		}
		events++
		var ev anthropicEvent
		if err := json.Unmarshal([]byte(strings.TrimPrefix(data, " ")), &ev); err != nil {
			return Message{}, notJSON(data)
		}
		switch ev.Type {
		case "error":
			msg := "no message"
			if ev.Error != nil {
				msg = ev.Error.Message
			}
			return Message{}, &ProviderError{Kind: KindProviderSaid, err: errdefs.ErrUnavailable, Msg: "the provider broke off its answer: " + errdefs.Clip(msg, 1024)}
		case "content_block_start":
			if ev.ContentBlock.Type == "tool_use" {
				if len(calls) == maxToolCalls {
					return Message{}, &ProviderError{Kind: KindBadStream, err: errdefs.ErrLimitExceeded, Msg: fmt.Sprintf("the provider's answer had more than %d tool calls; the turn stopped", maxToolCalls)}
				}
				if calls[ev.Index] == nil {
					order = append(order, ev.Index)
				}
				calls[ev.Index] = &ToolCall{ID: ev.ContentBlock.ID, Type: "function", Function: FunctionCall{Name: ev.ContentBlock.Name}}
			}
		case "content_block_delta":
			switch ev.Delta.Type {
			case "text_delta":
				content.WriteString(ev.Delta.Text)
				size += len(ev.Delta.Text)
				text(ev.Delta.Text)
			case "input_json_delta":
				if c := calls[ev.Index]; c != nil {
					c.Function.Arguments += ev.Delta.PartialJSON
					size += len(ev.Delta.PartialJSON)
				}
			}
		case "message_stop":
			m := Message{Role: "assistant", Content: content.String()}
			for i, idx := range order {
				c := calls[idx]
				if c.ID == "" {
					c.ID = fmt.Sprintf("call_%d", i)
				}
				if c.Function.Arguments == "" {
					c.Function.Arguments = "{}"
				}
				m.ToolCalls = append(m.ToolCalls, *c)
			}
			return m, nil
		}
		if size > maxAnswer {
			return Message{}, &ProviderError{Kind: KindBadStream, err: errdefs.ErrLimitExceeded, Msg: "the provider's answer passed 4 MiB; the turn stopped"}
		}
	}
}
