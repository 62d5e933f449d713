package coder

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// eventsFile keeps the conversation's events in the state directory, for the desktop to
// show the conversation again after a reload or a restart (`paddock-agent code --history`).
const eventsFile = "events.jsonl"

// maxEventLog bounds the event log: past it, the oldest events go when a turn begins.
const maxEventLog = 4 << 20

// eventLog appends a conversation's events to its file. The model's text, which streams
// in small pieces, is written as one text event per answer.
type eventLog struct {
	f    *os.File
	text *Event // the text of the answer under way, not yet written
}

// openEventLog opens the event log in dir, first trimming it to its newest half when it
// is over maxEventLog.
func openEventLog(dir string) (*eventLog, error) {
	path := filepath.Join(dir, eventsFile)
	if err := trimEventLog(path); err != nil {
		return nil, fmt.Errorf("the event log: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("the event log: %w", err)
	}
	return &eventLog{f: f}, nil
}

// trimEventLog keeps the newest half of an oversized log, from a line's start.
func trimEventLog(path string) error {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && st.Size() <= maxEventLog) {
		return nil
	}
	if err != nil {
		return err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	b = b[len(b)-maxEventLog/2:]
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// write logs e. A failure to log never stops the turn: the log is for showing it again.
func (l *eventLog) write(e Event) {
	if l == nil {
		return
	}
	if e.Type == EvText {
		if l.text != nil && l.text.Turn == e.Turn && l.text.Step == e.Step {
			l.text.Text += e.Text
			return
		}
		l.flush()
		t := e
		l.text = &t
		return
	}
	l.flush()
	_, _ = l.f.Write(encodeEvent(e))
}

func (l *eventLog) flush() {
	if l.text != nil {
		_, _ = l.f.Write(encodeEvent(*l.text))
		l.text = nil
	}
}

func (l *eventLog) close() error {
	if l == nil {
		return nil
	}
	l.flush()
	return l.f.Close()
}

// History writes the conversation's logged events in dir to w, as JSON lines: nothing
// when there is no conversation yet.
func History(dir string, w io.Writer) error {
	f, err := os.Open(filepath.Join(dir, eventsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("the event log: %w", err)
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}
