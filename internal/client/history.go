package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/paddockhq/paddock/internal/api"
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
