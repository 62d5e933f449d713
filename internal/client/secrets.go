package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/paddockhq/paddock/internal/api"
)

// ListSecrets lists the caller's secrets, without values (GET /api/v1/me/secrets).
func (c *Client) ListSecrets(ctx context.Context) ([]api.Secret, error) {
	var list api.SecretList
	return list.Secrets, c.do(ctx, "GET", "/api/v1/me/secrets", nil, &list, http.StatusOK)
}

// PutSecret sets the caller's secret name to value and returns its description.
func (c *Client) PutSecret(ctx context.Context, name, value string) (api.Secret, error) {
	var s api.Secret
	return s, c.do(ctx, "PUT", "/api/v1/me/secrets/"+url.PathEscape(name), api.PutSecretRequest{Value: value}, &s, http.StatusOK)
}

// DeleteSecret deletes the caller's secret name.
func (c *Client) DeleteSecret(ctx context.Context, name string) error {
	return c.do(ctx, "DELETE", "/api/v1/me/secrets/"+url.PathEscape(name), nil, nil, http.StatusNoContent)
}
