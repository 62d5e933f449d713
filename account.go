package paddock

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/paddockhq/paddock/internal/api"
)

// ListSecrets lists the caller's secrets, without their values: no call of this package
// reads a secret's value back.
func (c *Client) ListSecrets(ctx context.Context) ([]Secret, error) {
	var list api.SecretList
	err := c.do(ctx, "GET", "/api/v1/me/secrets", nil, &list, http.StatusOK)
	return list.Secrets, err
}

// PutSecret sets the caller's secret name to value and describes it.
func (c *Client) PutSecret(ctx context.Context, name, value string) (Secret, error) {
	var s Secret
	err := c.do(ctx, "PUT", "/api/v1/me/secrets/"+url.PathEscape(name), api.PutSecretRequest{Value: value}, &s, http.StatusOK)
	return s, err
}

// DeleteSecret deletes the caller's secret name.
func (c *Client) DeleteSecret(ctx context.Context, name string) error {
	return c.do(ctx, "DELETE", "/api/v1/me/secrets/"+url.PathEscape(name), nil, nil, http.StatusNoContent)
}

// Roles is the caller's live and dev sandboxes (created when missing).
func (c *Client) Roles(ctx context.Context) (Roles, error) {
	var r Roles
	err := c.do(ctx, "GET", "/api/v1/roles", nil, &r, http.StatusOK)
	return r, err
}

// Promote promotes dev to live in mode PromoteAuto: when dev runs a provider's dev server
// and has a packaged artifact, live serves the artifact and dev keeps its dev server;
// otherwise the two sandboxes swap. Roles.Mode says which was done.
func (c *Client) Promote(ctx context.Context) (Roles, error) {
	return c.PromoteMode(ctx, PromoteAuto)
}

// PromoteMode promotes dev to live in mode: PromoteAuto, PromoteSwap (swap the two
// sandboxes) or PromoteRelease (live serves dev's newest artifact; an error when there is
// none).
func (c *Client) PromoteMode(ctx context.Context, mode string) (Roles, error) {
	var r Roles
	err := c.do(ctx, "POST", "/api/v1/promote", api.PromoteRequest{Mode: mode}, &r, http.StatusOK)
	return r, err
}

// ListTokens lists the caller's API tokens (without their secrets).
func (c *Client) ListTokens(ctx context.Context) ([]Token, error) {
	var list api.TokenList
	err := c.do(ctx, "GET", "/api/v1/tokens", nil, &list, http.StatusOK)
	return list.Tokens, err
}

// CreateToken makes an API token; its secret is in the answer only.
func (c *Client) CreateToken(ctx context.Context, req CreateTokenRequest) (Token, error) {
	var t Token
	err := c.do(ctx, "POST", "/api/v1/tokens", req, &t, http.StatusCreated)
	return t, err
}

// RevokeToken revokes one of the caller's API tokens.
func (c *Client) RevokeToken(ctx context.Context, id string) error {
	return c.do(ctx, "DELETE", "/api/v1/tokens/"+url.PathEscape(id), nil, nil, http.StatusNoContent)
}

// ListInvites lists the registration invites (admins).
func (c *Client) ListInvites(ctx context.Context) ([]Invite, error) {
	var list api.InviteList
	err := c.do(ctx, "GET", "/api/v1/invites", nil, &list, http.StatusOK)
	return list.Invites, err
}

// CreateInvite makes a registration invite (admins); its code is in the answer only.
func (c *Client) CreateInvite(ctx context.Context, req CreateInviteRequest) (Invite, error) {
	var in Invite
	err := c.do(ctx, "POST", "/api/v1/invites", req, &in, http.StatusCreated)
	return in, err
}

// RevokeInvite revokes a registration invite (admins).
func (c *Client) RevokeInvite(ctx context.Context, id string) error {
	return c.do(ctx, "DELETE", "/api/v1/invites/"+url.PathEscape(id), nil, nil, http.StatusNoContent)
}

// EventQuery selects events: by action ("sandbox.create"), at most Limit (default 100,
// at most 1000), everyone's with All (admins).
type EventQuery struct {
	Action string
	Limit  int
	All    bool
}

// Events lists the caller's audit events, newest first.
func (c *Client) Events(ctx context.Context, q EventQuery) ([]Event, error) {
	v := url.Values{}
	if q.Action != "" {
		v.Set("action", q.Action)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.All {
		v.Set("all", "true")
	}
	path := "/api/v1/events"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var list api.EventList
	err := c.do(ctx, "GET", path, nil, &list, http.StatusOK)
	return list.Events, err
}

// RecordMCPToolCall records call, an MCP tool call this client served itself (as `paddock
// mcp` does over stdio), as the caller's mcp.tool_call event. The server checks the tool's
// name and that the sandbox is the caller's.
func (c *Client) RecordMCPToolCall(ctx context.Context, call MCPToolCall) error {
	return c.do(ctx, "POST", "/api/v1/events/mcp", call, nil, http.StatusNoContent)
}

// ListUsers lists every account, oldest first (admins; a token needs scope admin).
func (c *Client) ListUsers(ctx context.Context) ([]Account, error) {
	var list api.UserList
	err := c.do(ctx, "GET", "/api/v1/users", nil, &list, http.StatusOK)
	return list.Users, err
}
