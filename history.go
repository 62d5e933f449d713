package paddock

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/paddockhq/paddock/internal/api"
)

// Every change to a sandbox's workspace is recorded in its history: checkpoints the
// agent takes by itself (after a write, an exec), manual ones, and the restores between
// them. Undo and redo step through it; a transaction groups a multi-step change into one
// checkpoint, or none.

// History is the sandbox's workspace timeline, newest first.
func (s *Sandbox) History(ctx context.Context) (History, error) {
	var h History
	err := s.c.do(ctx, "GET", s.path("history"), nil, &h, http.StatusOK)
	return h, err
}

// Checkpoint records the workspace now, with an optional message. Created is false in
// the result when nothing had changed.
func (s *Sandbox) Checkpoint(ctx context.Context, message string) (CheckpointResult, error) {
	var res CheckpointResult
	err := s.c.do(ctx, "POST", s.path("history", "checkpoints"), api.CheckpointRequest{Message: message}, &res, http.StatusCreated, http.StatusOK)
	return res, err
}

// Undo restores the workspace to the checkpoint before the current one.
func (s *Sandbox) Undo(ctx context.Context) (RestoreResult, error) {
	return s.restore(ctx, "undo", nil)
}

// Redo takes back the last undo.
func (s *Sandbox) Redo(ctx context.Context) (RestoreResult, error) {
	return s.restore(ctx, "redo", nil)
}

// Restore makes the workspace exactly checkpoint's state (an ID or a unique prefix).
func (s *Sandbox) Restore(ctx context.Context, checkpoint string) (RestoreResult, error) {
	return s.restore(ctx, "restore", api.RestoreRequest{Checkpoint: checkpoint})
}

// Fork makes a new sandbox of the same owner whose workspace and history start from
// checkpoint at of this one ("": the current one; with a transaction open, the state
// before it, which the result's Note says). A checkpoint that does not exist is
// ErrNotFound, by name.
func (s *Sandbox) Fork(ctx context.Context, at string) (ForkResult, error) {
	var res ForkResult
	err := s.c.do(ctx, "POST", s.path("fork"), api.ForkRequest{At: at}, &res, http.StatusCreated)
	return res, err
}

func (s *Sandbox) restore(ctx context.Context, op string, in any) (RestoreResult, error) {
	var res RestoreResult
	err := s.c.do(ctx, "POST", s.path("history", op), in, &res, http.StatusOK)
	return res, err
}

// Diff lists the paths that differ from checkpoint from to checkpoint to; an empty from
// means to's parent.
func (s *Sandbox) Diff(ctx context.Context, from, to string) (HistoryDiff, error) {
	q := url.Values{"to": {to}}
	if from != "" {
		q.Set("from", from)
	}
	var d HistoryDiff
	err := s.c.do(ctx, "GET", s.path("history", "diff")+"?"+q.Encode(), nil, &d, http.StatusOK)
	return d, err
}

// Begin opens a transaction on the workspace; message becomes its commit's.
func (s *Sandbox) Begin(ctx context.Context, message string) (Transaction, error) {
	var tx Transaction
	err := s.c.do(ctx, "POST", s.path("history", "transaction"), api.BeginRequest{Message: message}, &tx, http.StatusCreated)
	return tx, err
}

// Commit closes the open transaction as one checkpoint.
func (s *Sandbox) Commit(ctx context.Context) (CommitResult, error) {
	var res CommitResult
	err := s.c.do(ctx, "POST", s.path("history", "transaction", "commit"), nil, &res, http.StatusOK)
	return res, err
}

// Rollback restores the workspace to its state when the open transaction began.
func (s *Sandbox) Rollback(ctx context.Context) (RollbackResult, error) {
	var res RollbackResult
	err := s.c.do(ctx, "POST", s.path("history", "transaction", "rollback"), nil, &res, http.StatusOK)
	return res, err
}

// HistoryEvents lists the sandbox's timeline events (checkpoints, restores,
// transactions) oldest first: those after the event ID after, at most limit (0: 100).
func (s *Sandbox) HistoryEvents(ctx context.Context, after int64, limit int) ([]Event, error) {
	q := url.Values{}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	path := s.path("history", "events")
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var list api.EventList
	err := s.c.do(ctx, "GET", path, nil, &list, http.StatusOK)
	return list.Events, err
}

// ExportHistory writes the sandbox's whole history, as one file, to w.
func (s *Sandbox) ExportHistory(ctx context.Context, w io.Writer) error {
	resp, err := s.c.raw(ctx, "GET", s.path("history", "export"), nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("export of %s: %w", s.ID, err)
	}
	return nil
}

// ImportHistory gives a new sandbox the history in r (an export) and its workspace.
func (s *Sandbox) ImportHistory(ctx context.Context, r io.Reader) (RestoreResult, error) {
	var res RestoreResult
	resp, err := s.c.raw(ctx, "POST", s.path("history", "import"), r, "application/octet-stream")
	if err != nil {
		return res, err
	}
	err = decodeRaw(resp, &res, "import into "+s.ID)
	return res, err
}
