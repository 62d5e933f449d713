package coder

import (
	"strings"
	"testing"
)

// The conversation sent to the model is cut at a user's message, whole turns first, and
// says what it left out; the current turn is kept even when it alone is too large.
func TestWindow(t *testing.T) {
	big := strings.Repeat("x", 1000)
	conv := []Message{
		{Role: "user", Content: "first " + big},
		{Role: "assistant", ToolCalls: []ToolCall{{ID: "c1", Function: FunctionCall{Name: "read_file", Arguments: "{}"}}}},
		{Role: "tool", ToolCallID: "c1", Content: big},
		{Role: "assistant", Content: "done"},
		{Role: "user", Content: "second"},
		{Role: "assistant", Content: "ok"},
		{Role: "user", Content: "third"},
	}
	for _, tc := range []struct {
		max   int
		first string // the content of the first message sent
		n     int
	}{
		{10000, "first " + big, 7},
		{500, "(paddock: the 4 oldest messages of this conversation were left out to fit the model's context)", 4},
		{5, "(paddock: the 6 oldest messages of this conversation were left out to fit the model's context)", 2},
	} {
		got := window(conv, tc.max)
		if len(got) != tc.n || got[0].Content != tc.first {
			t.Errorf("window(%d): %d messages from %q", tc.max, len(got), got[0].Content)
		}
	}
}
