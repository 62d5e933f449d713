// Package brokerclient is the sandbox's side of the secrets broker: `paddock-agent secret`
// asks the host's services, at the sandbox environment's PADDOCK_SERVICES_URL, for a
// capability. It is small on purpose: it is built into paddock-agent, which runs in every
// sandbox, and must not pull in the control plane.
package brokerclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/wire"
)

// Grant is the broker's answer to a resolve or a renewal (no value in a renewal).
type Grant struct {
	LeaseID    string    `json:"lease_id"`
	Capability string    `json:"capability"`
	Secret     string    `json:"secret"`
	Value      string    `json:"value,omitempty"`
	ExpiresAt  time.Time `json:"expires_at"`
	TTLSeconds int64     `json:"ttl_seconds"`
}

// Client talks to the broker.
type Client struct {
	Base string
	HTTP *http.Client
}

// FromEnv returns a client for the sandbox's host services.
func FromEnv() (*Client, error) {
	base := os.Getenv(wire.ServicesEnv)
	if base == "" {
		return nil, fmt.Errorf("%s is not set: this sandbox has no host services (run this inside a paddock sandbox)", wire.ServicesEnv)
	}
	return &Client{Base: strings.TrimRight(base, "/"), HTTP: &http.Client{Timeout: 30 * time.Second}}, nil
}

// Resolve asks for capability.
func (c *Client) Resolve(ctx context.Context, capability string) (Grant, error) {
	var g Grant
	err := c.do(ctx, http.MethodPost, "/v1/capabilities/"+url.PathEscape(capability), &g)
	return g, err
}

// Renew extends a lease.
func (c *Client) Renew(ctx context.Context, lease string) (Grant, error) {
	var g Grant
	err := c.do(ctx, http.MethodPost, "/v1/leases/"+url.PathEscape(lease)+"/renew", &g)
	return g, err
}

// Revoke ends a lease.
func (c *Client) Revoke(ctx context.Context, lease string) error {
	return c.do(ctx, http.MethodDelete, "/v1/leases/"+url.PathEscape(lease), nil)
}

// Error is the broker's refusal, with its reason.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Message }

func (c *Client) do(ctx context.Context, method, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("the host's services at %s: %w", c.Base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("read the broker's answer: %w", err)
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if json.Unmarshal(body, &e) != nil || e.Error.Message == "" {
			return &Error{Status: resp.StatusCode, Message: fmt.Sprintf("the broker answered %s", resp.Status)}
		}
		return &Error{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("the broker's answer: %w", err)
	}
	return nil
}

// Main runs `paddock-agent secret ARGS`: get CAPABILITY [--json], renew LEASE, revoke LEASE.
// get prints the value alone (no newline added), for $(paddock-agent secret get github).
func Main(ctx context.Context, args []string, stdout io.Writer) error {
	usage := errors.New("usage: paddock-agent secret get CAPABILITY [--json] | renew LEASE_ID | revoke LEASE_ID")
	if len(args) < 2 {
		return usage
	}
	c, err := FromEnv()
	if err != nil {
		return err
	}
	switch args[0] {
	case "get":
		asJSON := len(args) == 3 && args[2] == "--json"
		if len(args) > 3 || (len(args) == 3 && !asJSON) {
			return usage
		}
		g, err := c.Resolve(ctx, args[1])
		if err != nil {
			return err
		}
		if asJSON {
			return json.NewEncoder(stdout).Encode(g)
		}
		_, err = io.WriteString(stdout, g.Value)
		return err
	case "renew":
		g, err := c.Renew(ctx, args[1])
		if err != nil {
			return err
		}
		return json.NewEncoder(stdout).Encode(g)
	case "revoke":
		return c.Revoke(ctx, args[1])
	}
	return usage
}
