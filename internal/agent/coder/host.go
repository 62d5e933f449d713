package coder

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire"
)

const servicesEnv = wire.ServicesEnv

// Host is what the sandbox's platform does for the harness: make a turn one checkpoint (a
// transaction of the workspace's history, or a checkpoint when no transaction can be
// opened), undo, and report the app. Undo's and App's answers are text for the model.
type Host interface {
	// Begin opens a transaction and returns its ID.
	Begin(ctx context.Context, message string) (id string, err error)
	// Commit commits it and returns its checkpoint.
	Commit(ctx context.Context) (id string, err error)
	// OpenTransaction is the ID of the transaction open in the workspace, or "".
	OpenTransaction(ctx context.Context) (id string, err error)
	// Current is the checkpoint the workspace is at.
	Current(ctx context.Context) (id string, err error)
	// Rollback rolls the open transaction back and returns the checkpoint the workspace
	// is at again.
	Rollback(ctx context.Context) (current string, err error)
	Checkpoint(ctx context.Context, message string) (id string, err error)
	Undo(ctx context.Context) (string, error)
	App(ctx context.Context) (string, error)
	RestartApp(ctx context.Context) (string, error)
}

// ServicesHost reaches the host's services at base (the sandbox's PADDOCK_SERVICES_URL).
type ServicesHost struct {
	Base   string
	Client *http.Client
}

var _ Host = (*ServicesHost)(nil)

func (h *ServicesHost) Checkpoint(ctx context.Context, message string) (string, error) {
	var res api.CheckpointResult
	if err := h.do(ctx, "POST", wire.ServicesCheckpointPath, api.CheckpointRequest{Message: message}, &res); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	return res.Checkpoint.ID, nil
}

func (h *ServicesHost) Begin(ctx context.Context, message string) (string, error) {
	var tx api.Transaction
	if err := h.do(ctx, "POST", wire.ServicesBeginPath, api.BeginRequest{Message: message}, &tx); err != nil {
		return "", fmt.Errorf("opening the turn's transaction: %w", err)
	}
	return tx.ID, nil
}

func (h *ServicesHost) OpenTransaction(ctx context.Context) (string, error) {
	var hist api.History
	if err := h.do(ctx, "GET", wire.ServicesHistoryPath, nil, &hist); err != nil {
		return "", fmt.Errorf("reading the history: %w", err)
	}
	if hist.Transaction == nil {
		return "", nil
	}
	return hist.Transaction.ID, nil
}

func (h *ServicesHost) Current(ctx context.Context) (string, error) {
	var hist api.History
	if err := h.do(ctx, "GET", wire.ServicesHistoryPath, nil, &hist); err != nil {
		return "", fmt.Errorf("reading the history: %w", err)
	}
	return hist.Current, nil
}

func (h *ServicesHost) Rollback(ctx context.Context) (string, error) {
	var res api.RollbackResult
	if err := h.do(ctx, "POST", wire.ServicesRollbackPath, nil, &res); err != nil {
		return "", fmt.Errorf("rolling back: %w", err)
	}
	return res.Current, nil
}

func (h *ServicesHost) Commit(ctx context.Context) (string, error) {
	var res api.CommitResult
	if err := h.do(ctx, "POST", wire.ServicesCommitPath, nil, &res); err != nil {
		return "", fmt.Errorf("committing the turn's transaction: %w", err)
	}
	return res.Checkpoint.ID, nil
}

func (h *ServicesHost) Undo(ctx context.Context) (string, error) {
	var res api.RestoreResult
	if err := h.do(ctx, "POST", wire.ServicesUndoPath, nil, &res); err != nil {
		return "", fmt.Errorf("undo: %w", err)
	}
	s := fmt.Sprintf("undone: the workspace is back at checkpoint %s (%s)", res.Checkpoint.ID, res.Checkpoint.Message)
	if res.AppRestarted {
		s += "; the app restarted on it"
	}
	if res.AppNote != "" {
		s += "; " + res.AppNote
	}
	return s, nil
}

func (h *ServicesHost) App(ctx context.Context) (string, error) {
	var st api.AppStatus
	if err := h.do(ctx, "GET", wire.ServicesAppPath, nil, &st); err != nil {
		return "", fmt.Errorf("app status: %w", err)
	}
	return describeApp(st), nil
}

func (h *ServicesHost) RestartApp(ctx context.Context) (string, error) {
	var st api.AppStatus
	if err := h.do(ctx, "POST", wire.ServicesAppRestartPath, nil, &st); err != nil {
		return "", fmt.Errorf("restarting the app: %w", err)
	}
	return "the app is restarting; app_status shows how it goes\n" + describeApp(st), nil
}

// describeApp is the app's state as text for the model.
func describeApp(st api.AppStatus) string {
	var b strings.Builder
	fmt.Fprintf(&b, "state: %s\nrestarts: %d\nsince: %s\n", st.State, st.Restarts, st.Since.Format("2006-01-02T15:04:05Z"))
	if e := st.LastExit; e != nil {
		fmt.Fprintf(&b, "last exit: code %d signal %d %s\n", e.ExitCode, e.Signal, e.Error)
	}
	if st.LastOutput != "" {
		b.WriteString("--- the end of its last run's output ---\n" + st.LastOutput)
	}
	if st.Output != "" {
		b.WriteString("--- the end of the running app's output ---\n" + st.Output)
	}
	return b.String()
}

func (h *ServicesHost) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(h.Base, "/")+path, body)
	if err != nil {
		return fmt.Errorf("%s %q: %w", servicesEnv, h.Base, errdefs.ErrInvalidArgument)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c := h.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("the host's services did not answer (%s): %w", shortErr(err), errdefs.ErrUnavailable)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("HTTP %d: %s: %w", resp.StatusCode, errorMessage(b), errdefs.ErrUnavailable)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("the host's answer is not what was expected: %w", errdefs.ErrUnavailable)
	}
	return nil
}
