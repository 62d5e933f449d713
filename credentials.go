package paddock

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Environment variables that override the credentials file.
const (
	EnvServer = "PADDOCK_SERVER"
	EnvToken  = "PADDOCK_TOKEN"
)

// DefaultServer is the server `paddock login` signs in to when given no URL.
const DefaultServer = "http://127.0.0.1:8080"

// Credentials are what `paddock login` stores: the server and an API token for it.
type Credentials struct {
	Server   string `json:"server"`
	Token    string `json:"token"`
	Username string `json:"username,omitempty"`
	// TokenID lets `paddock logout` revoke the token.
	TokenID string `json:"token_id,omitempty"`
}

// LogValue keeps the token out of logs.
func (c Credentials) LogValue() slog.Value {
	return slog.GroupValue(slog.String("server", c.Server), slog.String("username", c.Username), slog.String("token", "[redacted]"))
}

// String keeps the token out of anything formatted with %v.
func (c Credentials) String() string {
	return fmt.Sprintf("{server %s, username %s, token [redacted]}", c.Server, c.Username)
}

// CredentialsPath is $XDG_CONFIG_HOME/paddock/credentials.json (~/.config/paddock by default).
func CredentialsPath() (string, error) {
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no home directory for the credentials file (set XDG_CONFIG_HOME): %w", errdefs.ErrFailedPrecondition)
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "paddock", "credentials.json"), nil
}

// ReadCredentials reads the credentials file; a missing one is errdefs.ErrNotFound.
func ReadCredentials() (Credentials, error) {
	var c Credentials
	path, err := CredentialsPath()
	if err != nil {
		return c, err
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, fmt.Errorf("no credentials at %s: %w", path, errdefs.ErrNotFound)
	}
	if err != nil {
		return c, fmt.Errorf("credentials: %w", err)
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, fmt.Errorf("credentials file %s is not valid JSON (run paddock login again): %w", path, errdefs.ErrInvalidArgument)
	}
	return c, nil
}

// LoadCredentials is what a command runs with: the credentials file, overridden field by
// field by PADDOCK_SERVER and PADDOCK_TOKEN. Without a token, it is
// errdefs.ErrUnauthenticated.
func LoadCredentials() (Credentials, error) {
	c, err := ReadCredentials()
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return c, err
	}
	if v := os.Getenv(EnvServer); v != "" {
		c.Server = v
	}
	if v := os.Getenv(EnvToken); v != "" {
		c.Token = v
	}
	if c.Token == "" {
		return c, fmt.Errorf("not signed in: run paddock login [URL] (or set %s and %s): %w", EnvServer, EnvToken, errdefs.ErrUnauthenticated)
	}
	if c.Server == "" {
		c.Server = DefaultServer
	}
	return c, nil
}

// SaveCredentials writes the credentials file, mode 0600 in a directory of mode 0700,
// replacing it atomically.
func SaveCredentials(c Credentials) error {
	path, err := CredentialsPath()
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("credentials directory: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("credentials directory: %w", err)
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".credentials-*.json") // mode 0600
	if err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(append(data, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("credentials: %w", err)
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("credentials: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	return nil
}

// RemoveCredentials deletes the credentials file; a missing one is errdefs.ErrNotFound.
func RemoveCredentials() error {
	path, err := CredentialsPath()
	if err != nil {
		return err
	}
	err = os.Remove(path)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no credentials at %s: %w", path, errdefs.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	return nil
}
