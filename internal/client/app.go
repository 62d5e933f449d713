package client

import (
	"context"
	"net/http"

	"github.com/paddockhq/paddock/internal/api"
)

// App is what a sandbox's supervised app is doing.
func (c *Client) App(ctx context.Context, id string) (api.AppStatus, error) {
	var st api.AppStatus
	return st, c.do(ctx, "GET", sandboxPath(id, "app"), nil, &st, http.StatusOK)
}
