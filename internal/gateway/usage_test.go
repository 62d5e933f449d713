package gateway

import (
	"strings"
	"testing"
)

func TestUsageSSE(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		wantIn  int64
		wantOut int64
	}{
		{"openai final chunk",
			"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n" +
				"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":34,\"total_tokens\":46}}\n\n" +
				"data: [DONE]\n\n", 12, 34},
		{"openai without usage", "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n", 0, 0},
		{"anthropic",
			"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n" +
				"event: ping\ndata: {\"type\": \"ping\"}\n\n" +
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"\\\"usage\\\":{\\\"input_tokens\\\":999}\"}}\n\n" +
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n" +
				"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", 25, 15},
		{"anthropic cache tokens",
			"data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"cache_creation_input_tokens\":100,\"cache_read_input_tokens\":1000,\"output_tokens\":1}}}\n\n", 1105, 1},
		{"responses API", "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"usage\":{\"input_tokens\":7,\"output_tokens\":8,\"total_tokens\":15}}}\n\n", 7, 8},
		{"CRLF", "data: {\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\r\n\r\n", 3, 4},
		{"CR", "data: {\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\r\r", 3, 4},
		{"data split over lines", "data: {\"usage\":\ndata: {\"prompt_tokens\":5,\ndata: \"completion_tokens\":6}}\n\n", 5, 6},
		{"no space after colon", "data:{\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\n", 1, 2},
		{"comments and other fields", ": keep-alive\nid: 1\nretry: 100\nevent: x\ndata: {\"usage\":{\"input_tokens\":9}}\n\n", 9, 0},
		{"usage deeper than 2 does not count", "data: {\"a\":{\"b\":{\"usage\":{\"input_tokens\":9}}}}\n\n", 0, 0},
		{"usage in an array does not count", "data: [{\"usage\":{\"input_tokens\":9}}]\n\n", 0, 0},
		{"an event without its end does not count", "data: {\"usage\":{\"input_tokens\":9}", 0, 0},
		{"a usage cut off by the event's end does not count", "data: {\"usage\":{\"input_tokens\":9\n\ndata: {}\n\n", 0, 0},
		{"negative and wrong types", "data: {\"usage\":{\"input_tokens\":-5,\"output_tokens\":\"7\"}}\n\n", 0, 0},
		{"one wrong field, one right", "data: {\"usage\":{\"input_tokens\":\"x\",\"output_tokens\":7}}\n\n", 0, 7},
		{"overflowing counts saturate", "data: {\"usage\":{\"input_tokens\":9223372036854775807,\"cache_read_input_tokens\":9223372036854775807}}\n\n", 1<<63 - 1, 0},
		{"field named like data", "datum: {\"usage\":{\"input_tokens\":9}}\n\n", 0, 0},
		{"escaped key is not usage", "data: {\"us\\u0061ge\":{\"input_tokens\":9}}\n\n", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, size := range []int{len(tc.in) + 1, 1, 2, 7} {
				var p sseParser
				for chunk := range chunks(tc.in, size) {
					p.Write([]byte(chunk))
				}
				if got := p.tokens(); got.in != tc.wantIn || got.out != tc.wantOut {
					t.Fatalf("fed in pieces of %d: got %d in, %d out; want %d, %d", size, got.in, got.out, tc.wantIn, tc.wantOut)
				}
			}
		})
	}
}

// The parser tells a stream's last event (after which the usage is final) from the rest.
func TestStreamEnd(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want bool
	}{
		{"chat completions [DONE]", "data: {\"choices\":[]}\n\ndata: [DONE]\n\n", true},
		{"chat completions before [DONE]", "data: {\"usage\":{\"prompt_tokens\":1}}\n\n", false},
		{"[DONE] without its blank line", "data: [DONE]\n", false},
		{"[DONE] split over two data lines", "data: [DO\ndata: NE]\n\n", false},
		{"[DONE] with more after it", "data: [DONE] and more\n\n", false},
		{"anthropic message_stop", "event: message_delta\ndata: {}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", true},
		{"anthropic message_delta", "event: message_delta\ndata: {\"usage\":{\"output_tokens\":3}}\n\n", false},
		{"responses completed", "event: response.completed\r\ndata: {}\r\n\r\n", true},
		{"responses failed", "event:response.failed\ndata: {}\n\n", true},
		{"responses delta", "event: response.output_text.delta\ndata: {}\n\n", false},
		{"a name without data is not an event", "event: message_stop\n\n", false},
		{"a longer name", "event: message_stop_and_more\ndata: {}\n\n", false},
		{"the last event field names the event", "event: message_stop\nevent: ping\ndata: {}\n\n", false},
		{"data is not a name", "data: message_stop\n\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, size := range []int{len(tc.in) + 1, 1, 2, 5} {
				var p sseParser
				for chunk := range chunks(tc.in, size) {
					p.Write([]byte(chunk))
				}
				if got := p.finished(); got != tc.want {
					t.Fatalf("fed in pieces of %d: finished %v, want %v", size, got, tc.want)
				}
			}
		})
	}
}

func TestUsageJSON(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		wantIn  int64
		wantOut int64
	}{
		{"openai", `{"id":"x","choices":[{"message":{"content":"\"usage\":{\"prompt_tokens\":999}"}}],"usage":{"prompt_tokens":10,"completion_tokens":20,"total_tokens":30,"completion_tokens_details":{"reasoning_tokens":5}}}`, 10, 20},
		{"anthropic", `{"id":"msg","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":3,"output_tokens":4}}`, 3, 4},
		{"usage first", `{"usage":{"input_tokens":3,"output_tokens":4},"id":"x"}`, 3, 4},
		{"white space", " {\n  \"usage\" :\n {\"prompt_tokens\" : 8 }\n}\n", 8, 0},
		{"null", `{"usage":null}`, 0, 0},
		{"not JSON", `<html>bad gateway</html>`, 0, 0},
		{"usage as a value, not a key", `{"a":"usage","b":["usage",{"c":1}]}`, 0, 0},
		{"huge usage is dropped", `{"usage":{"input_tokens":1,"pad":"` + strings.Repeat("x", maxUsageBytes) + `"}}`, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, size := range []int{len(tc.in) + 1, 1, 3} {
				var s usageScanner
				for chunk := range chunks(tc.in, size) {
					s.Write([]byte(chunk))
				}
				if got := s.tokens(); got.in != tc.wantIn || got.out != tc.wantOut {
					t.Fatalf("fed in pieces of %d: got %d in, %d out; want %d, %d", size, got.in, got.out, tc.wantIn, tc.wantOut)
				}
				if len(s.buf) > maxUsageBytes {
					t.Fatalf("scanner holds %d bytes", len(s.buf))
				}
			}
		})
	}
}

// chunks yields s in pieces of size bytes.
func chunks(s string, size int) func(func(string) bool) {
	return func(yield func(string) bool) {
		for len(s) > 0 {
			n := min(size, len(s))
			if !yield(s[:n]) {
				return
			}
			s = s[n:]
		}
	}
}
