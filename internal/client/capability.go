package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/paddockhq/paddock/internal/api"
)

// MintCapability mints a capability token for sandbox id; the answer's Token is the only
// copy of it.
func (c *Client) MintCapability(ctx context.Context, id string, req api.CapabilityRequest) (api.Capability, error) {
	var out api.Capability
	return out, c.do(ctx, "POST", sandboxPath(id, "capabilities"), req, &out, http.StatusCreated)
}

// Capabilities lists sandbox id's capability tokens, newest first.
func (c *Client) Capabilities(ctx context.Context, id string) ([]api.Capability, error) {
	var out api.CapabilityList
	return out.Capabilities, c.do(ctx, "GET", sandboxPath(id, "capabilities"), nil, &out, http.StatusOK)
}

// RevokeCapability revokes sandbox id's token capID.
func (c *Client) RevokeCapability(ctx context.Context, id, capID string) (api.Capability, error) {
	var out api.Capability
	return out, c.do(ctx, "DELETE", sandboxPath(id, "capabilities", url.PathEscape(capID)), nil, &out, http.StatusOK)
}
