package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/paddockhq/paddock/internal/api"
)

// Paths name sandbox id's workspace: "src/a.go", "/src/a.go" and "/workspace/src/a.go" are
// the same file.

// Mkdir makes a directory in sandbox id (POST …/files/mkdir). With Parents it makes the
// missing parents and accepts an existing directory, as mkdir -p.
func (c *Client) Mkdir(ctx context.Context, id string, req api.FileMkdirRequest) (api.FileInfo, error) {
	var fi api.FileInfo
	return fi, c.do(ctx, "POST", sandboxPath(id, "files", "mkdir"), req, &fi, http.StatusOK)
}

// Move renames a file or directory in sandbox id (POST …/files/move) and describes it at
// its new path. Without Overwrite an existing destination is errdefs.ErrAlreadyExists.
func (c *Client) Move(ctx context.Context, id string, req api.FileMoveRequest) (api.FileInfo, error) {
	var fi api.FileInfo
	return fi, c.do(ctx, "POST", sandboxPath(id, "files", "move"), req, &fi, http.StatusOK)
}

// Remove deletes a file or symlink in sandbox id (DELETE …/files/content); a directory
// with what it holds needs recursive.
func (c *Client) Remove(ctx context.Context, id, path string, recursive bool) error {
	q := url.Values{"path": {path}, "recursive": {strconv.FormatBool(recursive)}}
	return c.do(ctx, "DELETE", sandboxPath(id, "files", "content")+"?"+q.Encode(), nil, nil, http.StatusNoContent)
}
