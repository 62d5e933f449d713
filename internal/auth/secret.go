package auth

import "log/slog"

// redacted is what every secret-bearing type prints, logs and marshals as.
const redacted = "[redacted]"

// Password is a password as typed by a user. It prints and logs as "[redacted]".
type Password string

// SessionID is the secret value of a session cookie. It prints and logs as "[redacted]".
type SessionID string

// Token is an API token ("pdk_..."). It prints and logs as "[redacted]".
type Token string

// RecoveryCode is a recovery code. It prints and logs as "[redacted]".
type RecoveryCode string

// String implements fmt.Stringer with a redaction; use Reveal to get the secret.
func (Password) String() string { return redacted }

// GoString keeps %#v from printing the secret.
func (Password) GoString() string { return redacted }

// LogValue implements slog.LogValuer with a redaction.
func (Password) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalText keeps encoders (JSON, YAML) from writing the secret by accident.
func (Password) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// Reveal returns the password itself.
func (p Password) Reveal() string { return string(p) }

// String implements fmt.Stringer with a redaction; use Reveal to get the secret.
func (SessionID) String() string { return redacted }

// GoString keeps %#v from printing the secret.
func (SessionID) GoString() string { return redacted }

// LogValue implements slog.LogValuer with a redaction.
func (SessionID) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalText keeps encoders (JSON, YAML) from writing the secret by accident.
func (SessionID) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// Reveal returns the session ID itself, for the cookie.
func (s SessionID) Reveal() string { return string(s) }

// String implements fmt.Stringer with a redaction; use Reveal to get the secret.
func (Token) String() string { return redacted }

// GoString keeps %#v from printing the secret.
func (Token) GoString() string { return redacted }

// LogValue implements slog.LogValuer with a redaction.
func (Token) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalText keeps encoders (JSON, YAML) from writing the secret by accident.
func (Token) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// Reveal returns the token itself, to show it once.
func (t Token) Reveal() string { return string(t) }

// String implements fmt.Stringer with a redaction; use Reveal to get the secret.
func (RecoveryCode) String() string { return redacted }

// GoString keeps %#v from printing the secret.
func (RecoveryCode) GoString() string { return redacted }

// LogValue implements slog.LogValuer with a redaction.
func (RecoveryCode) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalText keeps encoders (JSON, YAML) from writing the secret by accident.
func (RecoveryCode) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// Reveal returns the code itself, to show it once.
func (c RecoveryCode) Reveal() string { return string(c) }
