package gateway

import "log/slog"

// redacted is what a Secret prints, logs and marshals as.
const redacted = "[redacted]"

// Secret is a platform provider key. It prints, logs and marshals (JSON, YAML, text) as
// "[redacted]", so that a Config or Provider can be logged or dumped whole without
// spilling the key; Reveal gives the key itself, which only the outbound request gets.
type Secret string

// String implements fmt.Stringer with a redaction.
func (Secret) String() string { return redacted }

// GoString keeps %#v from printing the key.
func (Secret) GoString() string { return redacted }

// LogValue implements slog.LogValuer with a redaction.
func (Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalJSON writes the redaction.
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText keeps the other encoders (YAML, encoding/xml) from writing the key.
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// Reveal returns the key itself.
func (s Secret) Reveal() string { return string(s) }
