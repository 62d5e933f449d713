package api

import (
	"fmt"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Limits on a secret.
const (
	// MaxSecretSize bounds one value: secrets are tokens and keys, not files.
	MaxSecretSize = 64 << 10
	// MaxSecretNameLen bounds a name.
	MaxSecretNameLen = 64
)

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

// ValidateSecretName checks a secret's name: 1 to 64 of a-z, 0-9, '.', '_' and '-', starting
// with a letter or digit. Lower case only, so that "GitHub" and "github" cannot be two
// secrets; no '/', so that a name is one URL path segment.
func ValidateSecretName(name string) error {
	ok := name != "" && len(name) <= MaxSecretNameLen && isAlnum(name[0])
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = isAlnum(c) || c == '.' || c == '_' || c == '-'
	}
	if !ok {
		shown := name
		if len(shown) > MaxSecretNameLen {
			shown = shown[:MaxSecretNameLen] + "…"
		}
		return fmt.Errorf("secret name %q: want 1 to %d characters of a-z, 0-9, '.', '_' and '-', starting with a letter or digit: %w",
			shown, MaxSecretNameLen, errdefs.ErrInvalidArgument)
	}
	return nil
}

func isAlnum(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }
