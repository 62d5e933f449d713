package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// History is a sandbox's workspace timeline, newest first.
func (c *Client) History(ctx context.Context, id string) (api.History, error) {
	var h api.History
	return h, c.do(ctx, "GET", sandboxPath(id, "history"), nil, &h, http.StatusOK)
}

// Checkpoint records a sandbox's workspace now, with an optional message. Created is false
// in the result when nothing had changed.
func (c *Client) Checkpoint(ctx context.Context, id, message string) (api.CheckpointResult, error) {
	var res api.CheckpointResult
	return res, c.do(ctx, "POST", sandboxPath(id, "history", "checkpoints"), api.CheckpointRequest{Message: message}, &res, http.StatusCreated, http.StatusOK)
}

// Undo restores a sandbox's workspace to the checkpoint before the current one.
func (c *Client) Undo(ctx context.Context, id string) (api.RestoreResult, error) {
	return c.restore(ctx, id, "undo", nil)
}

// Redo takes back the last undo.
func (c *Client) Redo(ctx context.Context, id string) (api.RestoreResult, error) {
	return c.restore(ctx, id, "redo", nil)
}

// Restore makes a sandbox's workspace exactly checkpoint's state.
func (c *Client) Restore(ctx context.Context, id, checkpoint string) (api.RestoreResult, error) {
	return c.restore(ctx, id, "restore", api.RestoreRequest{Checkpoint: checkpoint})
}

func (c *Client) restore(ctx context.Context, id, op string, in any) (api.RestoreResult, error) {
	var res api.RestoreResult
	return res, c.do(ctx, "POST", sandboxPath(id, "history", op), in, &res, http.StatusOK)
}

// HistoryDiff lists the paths that differ from checkpoint from to checkpoint to; an empty
// from means to's parent.
func (c *Client) HistoryDiff(ctx context.Context, id, from, to string) (api.HistoryDiff, error) {
	q := url.Values{"to": {to}}
	if from != "" {
		q.Set("from", from)
	}
	var d api.HistoryDiff
	return d, c.do(ctx, "GET", sandboxPath(id, "history", "diff")+"?"+q.Encode(), nil, &d, http.StatusOK)
}

// Begin opens a transaction on a sandbox's workspace; message becomes its commit's.
func (c *Client) Begin(ctx context.Context, id, message string) (api.Transaction, error) {
	var tx api.Transaction
	return tx, c.do(ctx, "POST", sandboxPath(id, "history", "transaction"), api.BeginRequest{Message: message}, &tx, http.StatusCreated)
}

// Commit closes a sandbox's open transaction as one checkpoint.
func (c *Client) Commit(ctx context.Context, id string) (api.CommitResult, error) {
	var res api.CommitResult
	return res, c.do(ctx, "POST", sandboxPath(id, "history", "transaction", "commit"), nil, &res, http.StatusOK)
}

// Rollback restores a sandbox's workspace to its state when the open transaction began.
func (c *Client) Rollback(ctx context.Context, id string) (api.RollbackResult, error) {
	var res api.RollbackResult
	return res, c.do(ctx, "POST", sandboxPath(id, "history", "transaction", "rollback"), nil, &res, http.StatusOK)
}

// ExportHistory writes a sandbox's whole history, as one file, to w.
func (c *Client) ExportHistory(ctx context.Context, id string, w io.Writer) error {
	resp, err := c.raw(ctx, "GET", sandboxPath(id, "history", "export"), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("export of %s: %w", id, err)
	}
	return nil
}

// ImportHistory gives a new sandbox the history in r (an export) and its workspace.
func (c *Client) ImportHistory(ctx context.Context, id string, r io.Reader) (api.RestoreResult, error) {
	var res api.RestoreResult
	resp, err := c.raw(ctx, "POST", sandboxPath(id, "history", "import"), r)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return res, fmt.Errorf("import into %s: reading the answer: %v: %w", id, err, errdefs.ErrUnavailable)
	}
	return res, nil
}

// raw sends a request with an octet-stream body and returns a 200 answer unread.
func (c *Client) raw(ctx context.Context, method, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, fmt.Errorf("server URL %q: %v: %w", c.base, err, errdefs.ErrInvalidArgument)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.transportError(err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, errorOf(resp)
	}
	return resp, nil
}
