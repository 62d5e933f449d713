package coder

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A conversation saved between a tool call and its results (the harness killed there) is
// read back without the unanswered call, which no provider would accept; a corrupt one is
// refused saying how to start afresh.
func TestConversationRead(t *testing.T) {
	dir, ws := t.TempDir(), t.TempDir()
	saved := conversation{Turns: 1, Messages: []Message{
		{Role: "user", Content: "go"},
		{Role: "assistant", ToolCalls: []ToolCall{{ID: "a"}, {ID: "b"}}},
		{Role: "tool", ToolCallID: "a", Content: "done"},
	}}
	b, _ := json.Marshal(saved)
	os.WriteFile(filepath.Join(dir, conversationFile), b, 0o600)
	c, err := openConversation(dir, ws)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Messages) != 1 || c.Messages[0].Content != "go" || c.Turns != 1 {
		t.Errorf("read back %+v", c.Messages)
	}

	os.WriteFile(filepath.Join(dir, conversationFile), []byte(`{"turns":`), 0o600)
	if _, err := openConversation(dir, ws); err == nil || !strings.Contains(err.Error(), "--reset") {
		t.Errorf("a corrupt conversation: %v", err)
	}
	if err := Reset(dir); err != nil {
		t.Fatal(err)
	}
	if c, err := openConversation(dir, ws); err != nil || len(c.Messages) != 0 {
		t.Errorf("after Reset: %+v, %v", c, err)
	}
}
