package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// SandboxPolicy returns the policy in force for sandbox id and where it comes from.
func (c *Client) SandboxPolicy(ctx context.Context, id string) (api.SandboxPolicy, error) {
	var p api.SandboxPolicy
	err := c.do(ctx, "GET", sandboxPath(id, "policy"), nil, &p, http.StatusOK)
	return p, err
}

// SetSandboxPolicy attaches the policy file text to sandbox id. A policy that does not
// load is refused with the server's message, which names the line and the field, and the
// sandbox keeps the policy it had.
func (c *Client) SetSandboxPolicy(ctx context.Context, id string, text []byte) (api.SandboxPolicy, error) {
	var p api.SandboxPolicy
	path := sandboxPath(id, "policy")
	req, err := http.NewRequestWithContext(ctx, "PUT", c.base+path, bytes.NewReader(text))
	if err != nil {
		return p, fmt.Errorf("server URL %q: %v: %w", c.base, err, errdefs.ErrInvalidArgument)
	}
	req.Header.Set("Content-Type", "application/yaml")
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return p, c.transportError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return p, errorOf(resp)
	}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		return p, fmt.Errorf("PUT %s: reading the answer: %v: %w", path, err, errdefs.ErrUnavailable)
	}
	return p, nil
}

// DeleteSandboxPolicy detaches sandbox id's own policy.
func (c *Client) DeleteSandboxPolicy(ctx context.Context, id string) error {
	return c.do(ctx, "DELETE", sandboxPath(id, "policy"), nil, nil, http.StatusNoContent)
}
