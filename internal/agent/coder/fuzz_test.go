package coder

import (
	"context"
	"os"
	"strings"
	"testing"
)

// FuzzReadStream feeds the provider's answer parser any bytes: it returns a message or an
// error, never panics, and keeps its answer within its bound.
func FuzzReadStream(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"function\":{\"name\":\"read_file\",\"arguments\":\"{\\\"pa\"}}]}}]}\n" +
		"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"th\\\":1}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n"))
	f.Add([]byte("data: {\"error\":{\"message\":\"boom\"}}\n"))
	f.Add([]byte(": comment\nevent: x\ndata: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":63}]}}]}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := readStream(strings.NewReader(string(b)), func(string) {})
		if err == nil && (len(m.Content) > maxAnswer || len(m.ToolCalls) > maxToolCalls) {
			t.Fatalf("answer over its bounds: %d bytes, %d calls", len(m.Content), len(m.ToolCalls))
		}
	})
}

// FuzzReadAnthropicStream is FuzzReadStream for Anthropic's stream.
func FuzzReadAnthropicStream(f *testing.F) {
	f.Add([]byte("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"x\"}}\n\n" +
		"data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}\n\ndata: {\"type\":\"message_stop\"}\n\n"))
	f.Add([]byte("data: {\"type\":\"error\",\"error\":{\"message\":\"overloaded\"}}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := readAnthropicStream(strings.NewReader(string(b)), func(string) {})
		if err == nil && (len(m.Content) > maxAnswer || len(m.ToolCalls) > maxToolCalls) {
			t.Fatalf("answer over its bounds: %d bytes, %d calls", len(m.Content), len(m.ToolCalls))
		}
	})
}

// FuzzToolCall gives the file tools that only read any name and arguments: an answer or
// an error, never a panic, and never a file outside the workspace.
func FuzzToolCall(f *testing.F) {
	f.Add("read_file", `{"path":"a.txt"}`)
	f.Add("read_file", `{"path":"../../etc/passwd"}`)
	f.Add("list_files", `{"path":"/","depth":99}`)
	f.Add("search_files", `{"pattern":"(a+)+$","path":"."}`)
	f.Add("edit_file", `{"path":"a.txt","old_string":"x","new_string":"y"}`)
	f.Add("nope", `[]`)
	dir := f.TempDir()
	os.WriteFile(dir+"/a.txt", []byte("hello\nworld\n"), 0o644)
	root, err := os.OpenRoot(dir)
	if err != nil {
		f.Fatal(err)
	}
	tb := &toolbox{dir: dir, root: root}
	f.Fuzz(func(t *testing.T, name, args string) {
		switch name {
		case "run_command", "write_file", "edit_file", "app_status", "undo":
			return // they change things, or need a host
		}
		out, _ := tb.call(context.Background(), name, args)
		if strings.Contains(out, "root:x:") {
			t.Fatalf("read outside the workspace: %q", out)
		}
	})
}

// FuzzBrowserURL feeds the browser tool's URL check any string from the model: it never
// panics, and what it lets through is an http or https URL with a host.
func FuzzBrowserURL(f *testing.F) {
	for _, s := range []string{"http://127.0.0.1:8080/", "file:///etc/passwd", "javascript:alert(1)", "http://", "https://example.com/a?b#c", "chrome://settings", "http://[::1]:80/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := checkURL(raw)
		if err != nil {
			return
		}
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			t.Fatalf("checkURL(%q) let %q through", raw, u)
		}
	})
}
