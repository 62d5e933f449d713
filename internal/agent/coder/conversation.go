package coder

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// conversationFile is the conversation's file in the state directory.
const conversationFile = "conversation.json"

// maxConversation bounds the conversation file read back.
const maxConversation = 64 << 20

// conversation is the sandbox's conversation, written whole after every message (to a
// temporary file renamed over the old one) so that a harness killed at any point leaves
// the last complete one.
type conversation struct {
	path     string
	Turns    int       `json:"turns"`
	Messages []Message `json:"messages"`
	// OpenTx is the transaction of the turn under way: set when it begins, cleared when
	// it is committed. Still set at the next run, it is a turn that never ended.
	OpenTx string `json:"open_tx,omitempty"`
	// LastCheckpoint is the checkpoint the last turn ended on. The workspace elsewhere at
	// the next turn was moved meanwhile (an undo, a restore), and the model is told.
	LastCheckpoint string `json:"last_checkpoint,omitempty"`
}

// openConversation reads the conversation in dir, or starts one.
func openConversation(dir, workspace string) (*conversation, error) {
	if err := checkStateDir(dir, workspace); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	c := &conversation{path: filepath.Join(dir, conversationFile)}
	b, err := os.ReadFile(c.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return c, nil
	case err != nil:
		return nil, fmt.Errorf("reading the conversation: %w", err)
	case len(b) > maxConversation:
		return nil, fmt.Errorf("the conversation %s is %d bytes, over %d; start another with --reset: %w", c.path, len(b), maxConversation, errdefs.ErrLimitExceeded)
	}
	if err := json.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("the conversation %s is corrupt (%v); start another with --reset: %w", c.path, err, errdefs.ErrDataLoss)
	}
	c.repair()
	return c, nil
}

// repair drops the tail of a conversation whose last assistant message called tools that
// never answered (the harness was killed between them), so that the provider accepts it.
func (c *conversation) repair() {
	for i := len(c.Messages) - 1; i >= 0; i-- {
		m := c.Messages[i]
		if m.Role != "assistant" || len(m.ToolCalls) == 0 {
			continue
		}
		if len(c.Messages)-1-i < len(m.ToolCalls) {
			c.Messages = c.Messages[:i]
		}
		return
	}
}

// begin starts turn n with the user's message.
func (c *conversation) begin(prompt string) int {
	c.Turns++
	_ = c.add(Message{Role: "user", Content: prompt}) // a failed save shows at the next add
	return c.Turns
}

// add appends m and saves.
func (c *conversation) add(m Message) error {
	c.push(m)
	return c.save()
}

// push appends m without saving it.
func (c *conversation) push(m Message) { c.Messages = append(c.Messages, m) }

// setOpenTx records the turn's open transaction ("" once it is committed).
func (c *conversation) setOpenTx(id string) error {
	c.OpenTx = id
	return c.save()
}

// setLastCheckpoint records the checkpoint a turn ended on.
func (c *conversation) setLastCheckpoint(id string) error {
	c.LastCheckpoint = id
	return c.save()
}

// saveBehind saves in the background; the conversation must not change until the
// save's error has been received.
func (c *conversation) saveBehind() <-chan error {
	done := make(chan error, 1)
	go func() { done <- c.save() }()
	return done
}

func (c *conversation) save() error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	tmp := c.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("saving the conversation: %w", err)
	}
	if err := os.Rename(tmp, c.path); err != nil {
		return fmt.Errorf("saving the conversation: %w", err)
	}
	return nil
}

// checkStateDir refuses a state directory that is unset or inside the workspace.
func checkStateDir(dir, workspace string) error {
	if dir == "" {
		return fmt.Errorf("state directory: required: %w", errdefs.ErrInvalidArgument)
	}
	if inside(dir, workspace) {
		return fmt.Errorf("state directory %s is inside the workspace %s, where undo would rewrite the conversation: %w", dir, workspace, errdefs.ErrInvalidArgument)
	}
	return nil
}

// inside says whether dir is workspace or below it.
func inside(dir, workspace string) bool {
	d, err1 := filepath.Abs(dir)
	w, err2 := filepath.Abs(workspace)
	if err1 != nil || err2 != nil {
		return false
	}
	return d == w || strings.HasPrefix(d, w+string(filepath.Separator))
}

// Reset forgets the conversation in dir, and its events.
func Reset(dir string) error {
	for _, name := range []string{conversationFile, eventsFile} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// insertNote puts a note for the model before the last message (the new turn's prompt).
func (c *conversation) insertNote(note string) error {
	n := len(c.Messages)
	if n == 0 {
		return c.add(Message{Role: "user", Content: note})
	}
	last := c.Messages[n-1]
	c.Messages = append(c.Messages[:n-1], Message{Role: "user", Content: note}, last)
	return c.save()
}
