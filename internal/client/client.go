// Package client is a small Go client for paddock's control-plane API (/api/v1 and
// /auth/token), used by the CLI. Every error it returns is in the errdefs taxonomy: an
// error answered by the server is an *Error carrying the server's message, and a server
// that cannot be reached is errdefs.ErrUnavailable.
//
// The API token is a bearer secret: it is sent only in the Authorization header, never in
// a URL, and no error or log line of this package carries it.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// Client talks to one control plane as one user.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// New returns a client of the server at baseURL (like http://127.0.0.1:8080) that
// authenticates with token (empty: unauthenticated, for Login).
func New(baseURL, token string) *Client {
	return &Client{base: strings.TrimRight(baseURL, "/"), token: token, http: &http.Client{}}
}

// BaseURL is the server's URL, without a trailing slash.
func (c *Client) BaseURL() string { return c.base }

// Error is an error the server answered with. It unwraps to the errdefs sentinel of its
// code, so that errors.Is(err, errdefs.ErrNotFound) works; Error() is the server's message.
type Error struct {
	// Status is the HTTP status; Code the API's error code.
	Status  int
	Code    string
	Message string
	kind    error
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the taxonomy sentinel of e's code (nil for an internal error).
func (e *Error) Unwrap() error { return e.kind }

// kindOf maps the API's error codes back to the taxonomy.
var kindOf = map[string]error{
	api.CodeInvalidArgument:    errdefs.ErrInvalidArgument,
	api.CodeTooLarge:           errdefs.ErrInvalidArgument,
	api.CodeUnsupportedMedia:   errdefs.ErrInvalidArgument,
	api.CodeMethodNotAllowed:   errdefs.ErrInvalidArgument,
	api.CodeUnauthenticated:    errdefs.ErrUnauthenticated,
	api.CodePermissionDenied:   errdefs.ErrPermissionDenied,
	api.CodeNotFound:           errdefs.ErrNotFound,
	api.CodeAlreadyExists:      errdefs.ErrAlreadyExists,
	api.CodeFailedPrecondition: errdefs.ErrFailedPrecondition,
	api.CodeLimitExceeded:      errdefs.ErrLimitExceeded,
	api.CodeUnavailable:        errdefs.ErrUnavailable,
	api.CodeDeadlineExceeded:   errdefs.ErrDeadlineExceeded,
	api.CodeDataLoss:           errdefs.ErrDataLoss,
}

// kindOfStatus classifies an error response that is not in the API's shape (a proxy in
// front of the server answered, say).
func kindOfStatus(status int) (string, error) {
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType, http.StatusMethodNotAllowed:
		return api.CodeInvalidArgument, errdefs.ErrInvalidArgument
	case http.StatusUnauthorized:
		return api.CodeUnauthenticated, errdefs.ErrUnauthenticated
	case http.StatusForbidden:
		return api.CodePermissionDenied, errdefs.ErrPermissionDenied
	case http.StatusNotFound:
		return api.CodeNotFound, errdefs.ErrNotFound
	case http.StatusConflict:
		return api.CodeFailedPrecondition, errdefs.ErrFailedPrecondition
	case http.StatusTooManyRequests:
		return api.CodeLimitExceeded, errdefs.ErrLimitExceeded
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		return api.CodeUnavailable, errdefs.ErrUnavailable
	case http.StatusGatewayTimeout:
		return api.CodeDeadlineExceeded, errdefs.ErrDeadlineExceeded
	}
	return api.CodeInternal, nil
}

// errorOf reads an error response (at most 64 KiB of it).
func errorOf(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var body api.Error
	if json.Unmarshal(data, &body) == nil && body.Error.Code != "" && body.Error.Message != "" {
		return &Error{Status: resp.StatusCode, Code: body.Error.Code, Message: body.Error.Message, kind: kindOf[body.Error.Code]}
	}
	code, kind := kindOfStatus(resp.StatusCode)
	return &Error{Status: resp.StatusCode, Code: code, kind: kind,
		Message: fmt.Sprintf("%s %s: the server answered %s", resp.Request.Method, resp.Request.URL.Path, resp.Status)}
}

// do sends a request with a JSON body (in, unless nil) and decodes a JSON answer into
// out (unless nil) when the status is one of want.
func (c *Client) do(ctx context.Context, method, path string, in, out any, want ...int) error {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return fmt.Errorf("server URL %q: %v: %w", c.base, err, errdefs.ErrInvalidArgument)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return c.transportError(err)
	}
	defer resp.Body.Close()
	if !slices.Contains(want, resp.StatusCode) {
		return errorOf(resp)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: reading the answer: %v: %w", method, path, err, errdefs.ErrUnavailable)
	}
	return nil
}

// transportError says that the server could not be reached, without the URL's noise.
func (c *Client) transportError(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("cannot reach the paddock server at %s: %v: %w", c.base, err, errdefs.ErrUnavailable)
}

func sandboxPath(id string, rest ...string) string {
	p := "/api/v1/sandboxes/" + url.PathEscape(id)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// Login trades a username and password for an API token named name (POST /auth/token).
// The token's secret is in the answer's Secret field.
func (c *Client) Login(ctx context.Context, username, password, name string) (api.Token, error) {
	var tok api.Token
	err := c.do(ctx, "POST", "/auth/token", api.TokenRequest{Username: username, Password: password, Name: name}, &tok, http.StatusCreated)
	return tok, err
}

// Me is the caller (GET /api/v1/me).
func (c *Client) Me(ctx context.Context) (api.User, error) {
	var u api.User
	return u, c.do(ctx, "GET", "/api/v1/me", nil, &u, http.StatusOK)
}

// ListSandboxes lists the caller's sandboxes; with all (admins only), everyone's.
func (c *Client) ListSandboxes(ctx context.Context, all bool) ([]api.Sandbox, error) {
	path := "/api/v1/sandboxes"
	if all {
		path += "?all=true"
	}
	var list api.SandboxList
	return list.Sandboxes, c.do(ctx, "GET", path, nil, &list, http.StatusOK)
}

// CreateSandbox creates a sandbox. A sandbox that was recorded but failed to start is
// returned without an error, in state failed with its Error set.
func (c *Client) CreateSandbox(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	var sb api.Sandbox
	return sb, c.do(ctx, "POST", "/api/v1/sandboxes", req, &sb, http.StatusCreated)
}

// GetSandbox describes one sandbox.
func (c *Client) GetSandbox(ctx context.Context, id string) (api.Sandbox, error) {
	var sb api.Sandbox
	return sb, c.do(ctx, "GET", sandboxPath(id), nil, &sb, http.StatusOK)
}

// DeleteSandbox destroys a sandbox and its workspace.
func (c *Client) DeleteSandbox(ctx context.Context, id string) error {
	return c.do(ctx, "DELETE", sandboxPath(id), nil, nil, http.StatusNoContent)
}

// Stop stops a sandbox, keeping its workspace.
func (c *Client) Stop(ctx context.Context, id string) (api.Sandbox, error) {
	return c.lifecycle(ctx, id, "stop")
}

// Start starts a stopped, failed or lost sandbox.
func (c *Client) Start(ctx context.Context, id string) (api.Sandbox, error) {
	return c.lifecycle(ctx, id, "start")
}

// Restart stops and starts a sandbox.
func (c *Client) Restart(ctx context.Context, id string) (api.Sandbox, error) {
	return c.lifecycle(ctx, id, "restart")
}

func (c *Client) lifecycle(ctx context.Context, id, op string) (api.Sandbox, error) {
	var sb api.Sandbox
	return sb, c.do(ctx, "POST", sandboxPath(id, op), nil, &sb, http.StatusOK)
}

// Exec runs a one-shot command in a sandbox and returns its whole output.
func (c *Client) Exec(ctx context.Context, id string, req api.ExecRequest) (api.ExecResult, error) {
	var res api.ExecResult
	return res, c.do(ctx, "POST", sandboxPath(id, "exec"), req, &res, http.StatusOK)
}

// Roles is the caller's live and dev sandboxes (created when missing).
func (c *Client) Roles(ctx context.Context) (api.Roles, error) {
	var r api.Roles
	return r, c.do(ctx, "GET", "/api/v1/roles", nil, &r, http.StatusOK)
}

// Promote swaps the caller's live and dev sandboxes.
func (c *Client) Promote(ctx context.Context) (api.Roles, error) {
	var r api.Roles
	return r, c.do(ctx, "POST", "/api/v1/promote", nil, &r, http.StatusOK)
}

// ListTokens lists the caller's API tokens (without their secrets).
func (c *Client) ListTokens(ctx context.Context) ([]api.Token, error) {
	var list api.TokenList
	return list.Tokens, c.do(ctx, "GET", "/api/v1/tokens", nil, &list, http.StatusOK)
}

// RevokeToken revokes one of the caller's API tokens.
func (c *Client) RevokeToken(ctx context.Context, id string) error {
	return c.do(ctx, "DELETE", "/api/v1/tokens/"+url.PathEscape(id), nil, nil, http.StatusNoContent)
}

// CreateToken makes an API token; its secret is in the answer only.
func (c *Client) CreateToken(ctx context.Context, req api.CreateTokenRequest) (api.Token, error) {
	var t api.Token
	return t, c.do(ctx, "POST", "/api/v1/tokens", req, &t, http.StatusCreated)
}

// ListInvites lists the registration invites (admins).
func (c *Client) ListInvites(ctx context.Context) ([]api.Invite, error) {
	var list api.InviteList
	return list.Invites, c.do(ctx, "GET", "/api/v1/invites", nil, &list, http.StatusOK)
}

// CreateInvite makes a registration invite (admins); its code is in the answer only.
func (c *Client) CreateInvite(ctx context.Context, req api.CreateInviteRequest) (api.Invite, error) {
	var in api.Invite
	return in, c.do(ctx, "POST", "/api/v1/invites", req, &in, http.StatusCreated)
}

// RevokeInvite revokes a registration invite (admins).
func (c *Client) RevokeInvite(ctx context.Context, id string) error {
	return c.do(ctx, "DELETE", "/api/v1/invites/"+url.PathEscape(id), nil, nil, http.StatusNoContent)
}
