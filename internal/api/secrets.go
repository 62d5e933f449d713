package api

import "time"

// PutSecretRequest is PUT /me/secrets/{name} (and /api/v1/me/secrets/{name}): the new
// value, a UTF-8 string of 1 byte to 64 KiB.
type PutSecretRequest struct {
	Value string `json:"value"`
}

// Secret describes one of the caller's secrets. No answer ever carries a value.
type Secret struct {
	Name string `json:"name"`
	// Version is 1 when the secret was made and grows by one on every PUT.
	Version   int64     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// SecretList is GET /me/secrets: the caller's secrets by name.
type SecretList struct {
	Secrets []Secret `json:"secrets"`
}
