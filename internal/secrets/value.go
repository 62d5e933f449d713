package secrets

import (
	"bytes"
	"fmt"
	"log/slog"
)

// redacted is what a Value prints, logs and marshals as.
const redacted = "[redacted]"

// Value is a secret's plaintext. Printed with any fmt verb, logged with slog, or
// marshalled to JSON or text, it shows "[redacted]": a value that reaches a log line or
// an API answer by mistake shows nothing. Reveal is the one way to the bytes. A struct
// (not a []byte) so that a conversion cannot reach them either.
type Value struct{ b []byte }

// Reveal returns a copy of the plaintext. Call it only where the value leaves for its
// one legitimate use (the broker's lease to a sandbox).
func (v Value) Reveal() []byte { return bytes.Clone(v.b) }

// Len is the value's size in bytes.
func (v Value) Len() int { return len(v.b) }

// String implements fmt.Stringer with a redaction.
func (Value) String() string { return redacted }

// GoString keeps %#v from printing the value.
func (Value) GoString() string { return redacted }

// Format makes every fmt verb (%v, %+v, %s, %x, %d, …) print the redaction: a []byte
// field would otherwise print as numbers under %d.
func (Value) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// LogValue implements slog.LogValuer with a redaction.
func (Value) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalJSON writes the redaction as a JSON string.
func (Value) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText keeps other encoders (YAML, XML) from writing the value.
func (Value) MarshalText() ([]byte, error) { return []byte(redacted), nil }
