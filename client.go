// Package paddock is the Go client of a paddock server's API (/api/v1): sandboxes, commands
// run in them (one-shot, streamed, or on a terminal), their files (one by one, or whole
// trees as tar streams), their workspace history, and the account around them (secrets,
// API tokens, events, the live and dev roles). The paddock CLI is built on it.
//
//	c, err := paddock.Dial(ctx, "http://127.0.0.1:8080", paddock.WithToken(token))
//	sb, err := c.Sandboxes.Create(ctx, paddock.SandboxSpec{Memory: "512M"})
//	res, err := sb.Exec(ctx, []string{"go", "test", "./..."})
//
// Errors the server answers are *Error values carrying its message, the API's error code
// and, when a limit was hit, which one. They match this package's sentinels with
// errors.Is (ErrNotFound, ErrLimitExceeded, …). A server that cannot be reached is
// ErrUnavailable.
//
// The API token is a bearer secret: it is sent only in the Authorization header, never in
// a URL, and no error or log line of this package carries it.
package paddock

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

// Client talks to one paddock server as one user. It is safe for concurrent use.
type Client struct {
	base  string
	token string
	http  *http.Client

	// Sandboxes creates, lists and finds sandboxes.
	Sandboxes *Sandboxes
}

// Option configures a Client.
type Option func(*Client)

// WithToken authenticates every request with an API token (or a capability token, on
// the routes that take one).
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient sends requests with hc instead of a client of its own.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// New returns a client of the server at baseURL (like http://127.0.0.1:8080) without
// contacting it. Without WithToken it is unauthenticated, which only Login and Health
// accept.
func New(baseURL string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), http: &http.Client{}}
	for _, o := range opts {
		o(c)
	}
	c.Sandboxes = &Sandboxes{c: c}
	return c
}

// Dial returns a client of the server at baseURL once the server answers its health
// check: an unreachable server is ErrUnavailable here rather than at the first call.
func Dial(ctx context.Context, baseURL string, opts ...Option) (*Client, error) {
	c := New(baseURL, opts...)
	if _, err := url.ParseRequestURI(c.base); err != nil || !strings.HasPrefix(c.base, "http") {
		return nil, fmt.Errorf("server URL %q: want http://host:port or https://host: %w", baseURL, errdefs.ErrInvalidArgument)
	}
	if _, err := c.Health(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// BaseURL is the server's URL, without a trailing slash.
func (c *Client) BaseURL() string { return c.base }

// Health is the server's health check (GET /healthz). A server that is up but not
// healthy answers with its checks and no error.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	err := c.do(ctx, "GET", "/healthz", nil, &h, http.StatusOK, http.StatusServiceUnavailable)
	return h, err
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
	resp, err := c.send(ctx, method, path, body, "application/json")
	if err != nil {
		return err
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

// send sends a request with body of content type ct (when body is not nil) and returns
// the answer, whatever its status.
func (c *Client) send(ctx context.Context, method, path string, body io.Reader, ct string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, fmt.Errorf("server URL %q: %v: %w", c.base, err, errdefs.ErrInvalidArgument)
	}
	if body != nil {
		req.Header.Set("Content-Type", ct)
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.transportError(err)
	}
	return resp, nil
}

// raw sends a request with a body of content type ct and returns a 200 answer unread.
func (c *Client) raw(ctx context.Context, method, path string, body io.Reader, ct string) (*http.Response, error) {
	resp, err := c.send(ctx, method, path, body, ct)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, errorOf(resp)
	}
	return resp, nil
}

// decodeRaw decodes a raw answer's JSON into out and closes it.
func decodeRaw(resp *http.Response, out any, what string) error {
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s: reading the answer: %v: %w", what, err, errdefs.ErrUnavailable)
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
// The token's secret is in the answer's Secret field, and only there.
func (c *Client) Login(ctx context.Context, username, password, name string) (Token, error) {
	var tok Token
	err := c.do(ctx, "POST", "/auth/token", api.TokenRequest{Username: username, Password: password, Name: name}, &tok, http.StatusCreated)
	return tok, err
}

// AgentSettings is the caller's choice for the coding agent, and the providers to choose
// from (GET /api/v1/me/agent).
func (c *Client) AgentSettings(ctx context.Context) (AgentSettings, error) {
	var out AgentSettings
	err := c.do(ctx, "GET", "/api/v1/me/agent", nil, &out, http.StatusOK)
	return out, err
}

// SetAgentChoice records the caller's provider and model for the coding agent (PUT
// /api/v1/me/agent); the zero choice goes back to the server's default.
func (c *Client) SetAgentChoice(ctx context.Context, choice AgentChoice) (AgentSettings, error) {
	var out AgentSettings
	err := c.do(ctx, "PUT", "/api/v1/me/agent", choice, &out, http.StatusOK)
	return out, err
}

// Me is the caller (GET /api/v1/me).
func (c *Client) Me(ctx context.Context) (User, error) {
	var u User
	err := c.do(ctx, "GET", "/api/v1/me", nil, &u, http.StatusOK)
	return u, err
}
