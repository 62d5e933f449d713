package capability

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// redacted is what a key prints, logs and marshals as.
const redacted = "[redacted]"

// Root key sizes: 32 bytes is HMAC-SHA256's strength; over 64 HMAC would hash the key first.
const (
	minKeyLen = 32
	maxKeyLen = 64
)

// RootKey is a secret key that tokens are signed under. Printed with any fmt verb,
// logged with slog or marshalled, it shows "[redacted]"; Reveal is the one way to its
// bytes. A struct, not a []byte, so that no conversion reaches them either.
type RootKey struct{ b []byte }

// NewRootKey returns a fresh random 32-byte key.
func NewRootKey() RootKey {
	b := make([]byte, minKeyLen)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return RootKey{b}
}

// RootKeyFromBytes makes a key of 32 to 64 secret random bytes (a copy is kept).
func RootKeyFromBytes(b []byte) (RootKey, error) {
	if len(b) < minKeyLen || len(b) > maxKeyLen {
		return RootKey{}, fmt.Errorf("a capability root key is %d to %d random bytes, not %d: %w", minKeyLen, maxKeyLen, len(b), errdefs.ErrInvalidArgument)
	}
	return RootKey{bytes.Clone(b)}, nil
}

// Reveal returns a copy of the key's bytes, to store it.
func (k RootKey) Reveal() []byte { return bytes.Clone(k.b) }

// String implements fmt.Stringer with a redaction.
func (RootKey) String() string { return redacted }

// GoString keeps %#v from printing the key.
func (RootKey) GoString() string { return redacted }

// Format makes every fmt verb (%v, %x, %d, …) print the redaction.
func (RootKey) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// LogValue implements slog.LogValuer with a redaction.
func (RootKey) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalJSON writes the redaction as a JSON string.
func (RootKey) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText keeps other encoders (YAML, XML) from writing the key.
func (RootKey) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// Keyring is a versioned set of root keys: the primary signs new tokens, the others
// verify tokens minted before a rotation. It is immutable; a rotation makes a new one
// ([Keyring.WithKey]). It prints and logs as its key IDs, never its keys.
//
// The control plane's keyring holds the root keys themselves. An agent's keyring
// ([Keyring.ForAgent]) holds keys derived from them for one subject and the Agent
// audience only.
type Keyring struct {
	primary uint32
	keys    map[uint32][]byte
	agent   string // the subject of an agent keyring; "" for the control plane's
}

// NewKeyring makes the control plane's keyring: primary signs new tokens; it must be
// among keys. Key IDs are 1 to 2^32-1.
func NewKeyring(primary uint32, keys map[uint32]RootKey) (*Keyring, error) {
	k := &Keyring{primary: primary, keys: make(map[uint32][]byte, len(keys))}
	for id, key := range keys {
		if id == 0 {
			return nil, fmt.Errorf("capability keyring: key ID 0: IDs start at 1: %w", errdefs.ErrInvalidArgument)
		}
		if len(key.b) < minKeyLen {
			return nil, fmt.Errorf("capability keyring: key %d is not a key (use NewRootKey or RootKeyFromBytes): %w", id, errdefs.ErrInvalidArgument)
		}
		k.keys[id] = key.b
	}
	if k.keys[primary] == nil {
		return nil, fmt.Errorf("capability keyring: the primary key %d is not among the keys: %w", primary, errdefs.ErrInvalidArgument)
	}
	return k, nil
}

// WithKey returns a copy of the keyring with key added as id and made primary: a
// rotation. Tokens minted under the older keys keep verifying until their keys are
// dropped (by making a keyring without them). An agent's keyring is not rotated on its
// own: derive it again from the rotated control-plane keyring.
func (k *Keyring) WithKey(id uint32, key RootKey) (*Keyring, error) {
	if k.agent != "" {
		return nil, fmt.Errorf("capability keyring: an agent's keyring is derived, not rotated: derive it again with ForAgent: %w", errdefs.ErrFailedPrecondition)
	}
	if _, dup := k.keys[id]; dup {
		return nil, fmt.Errorf("capability keyring: key ID %d is already in use: %w", id, errdefs.ErrAlreadyExists)
	}
	keys := make(map[uint32]RootKey, len(k.keys)+1)
	for i, b := range k.keys {
		keys[i] = RootKey{b}
	}
	keys[id] = key
	return NewKeyring(id, keys)
}

// ForAgent derives the keyring to give the agent in subject's sandbox: one key per root
// key, HMAC-SHA256(root key, "paddock capability key v1" 0x00 0x02 subject). It
// verifies (and mints) Agent tokens of that subject and nothing else, and does not lead
// back to the root keys.
func (k *Keyring) ForAgent(subject string) (*Keyring, error) {
	if err := checkSubject(subject); err != nil {
		return nil, fmt.Errorf("capability keyring: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if k.agent != "" {
		if k.agent == subject {
			return k, nil
		}
		return nil, fmt.Errorf("capability keyring: this is the keyring of %s; another subject's is derived from the control plane's: %w", k.agent, errdefs.ErrFailedPrecondition)
	}
	a := &Keyring{primary: k.primary, keys: make(map[uint32][]byte, len(k.keys)), agent: subject}
	for id, root := range k.keys {
		d := deriveKey(root, Agent, subject)
		a.keys[id] = d[:]
	}
	return a, nil
}

// deriveKey is the key that signs the tokens of one audience and subject.
func deriveKey(root []byte, aud Audience, subject string) [sigSize]byte {
	msg := make([]byte, 0, len(deriveLabel)+2+len(subject))
	msg = append(append(append(msg, deriveLabel...), 0, byte(aud)), subject...)
	return mac(root, msg)
}

const deriveLabel = "paddock capability key v1"

// Primary is the key ID that signs new tokens.
func (k *Keyring) Primary() uint32 { return k.primary }

// Oldest is the keyring's lowest key ID: the key added first, since a rotation adds a
// higher one (NextID). Agent tokens are signed under it (see Minter.Mint).
func (k *Keyring) Oldest() uint32 { return slices.Min(slices.Collect(maps.Keys(k.keys))) }

// NextID is the key ID a rotation gives its new key: one above the highest.
func (k *Keyring) NextID() uint32 { return slices.Max(slices.Collect(maps.Keys(k.keys))) + 1 }

// KeyIDs are the keyring's key IDs, in order.
func (k *Keyring) KeyIDs() []uint32 { return slices.Sorted(maps.Keys(k.keys)) }

// Agent is the subject an agent's keyring is for; "" for the control plane's.
func (k *Keyring) Agent() string { return k.agent }

// signingKey is the key of the first link of the chain of a token of aud and subject
// under key id, or why the keyring has none.
func (k *Keyring) signingKey(id uint32, aud Audience, subject string) ([sigSize]byte, *Error) {
	root, ok := k.keys[id]
	switch {
	case !ok:
		return [sigSize]byte{}, denied(ReasonUnknownKey, "", -1, "unknown key ID %d (this verifier holds %v)", id, k.KeyIDs())
	case k.agent == "":
		return deriveKey(root, aud, subject), nil
	case aud != Agent:
		return [sigSize]byte{}, denied(ReasonAudience, "", -1, "the token is for %s, not the agent", aud)
	case subject != k.agent:
		return [sigSize]byte{}, denied(ReasonSubject, "", -1, "the token is for %s; this agent holds only the key of %s", subject, k.agent)
	}
	return [sigSize]byte(root), nil
}

// keyringHeader is the exported keyring's first line; the number is the format's version.
const keyringHeader = "paddock-capability-keyring 1"

// Export writes the keyring, keys included, in a small text format that ParseKeyring
// reads: for the control plane to store its keyring, and to hand an agent its own.
//
//	paddock-capability-keyring 1
//	primary 2
//	agent sandbox:sb-abc          (an agent's keyring only)
//	key 1 <standard base64 of the key>
//	key 2 <standard base64 of the key>
//
// Treat what it returns as the keys themselves.
func (k *Keyring) Export() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\nprimary %d\n", keyringHeader, k.primary)
	if k.agent != "" {
		fmt.Fprintf(&b, "agent %s\n", k.agent)
	}
	for _, id := range k.KeyIDs() {
		fmt.Fprintf(&b, "key %d %s\n", id, base64.StdEncoding.EncodeToString(k.keys[id]))
	}
	return b.Bytes()
}

// ParseKeyring reads what Export wrote; blank lines and lines starting with # are
// ignored. Errors name the line, never its content: a line may hold a key.
func ParseKeyring(data []byte) (*Keyring, error) {
	k, err := parseKeyring(data)
	if err != nil {
		return nil, fmt.Errorf("capability keyring: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	return k, nil
}

func parseKeyring(data []byte) (*Keyring, error) {
	if len(data) > 64<<10 {
		return nil, errors.New("over 64 KiB")
	}
	header, hasPrimary := false, false
	k := &Keyring{keys: map[uint32][]byte{}}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		n, f := i+1, strings.Fields(line)
		switch {
		case !header:
			if strings.Join(f, " ") != keyringHeader {
				return nil, fmt.Errorf("line %d: want the header %q first", n, keyringHeader)
			}
			header = true
		case f[0] == "primary" && len(f) == 2 && !hasPrimary:
			id, err := parseKeyID(f[1])
			if err != nil {
				return nil, fmt.Errorf("line %d: primary: %v", n, err)
			}
			k.primary, hasPrimary = id, true
		case f[0] == "agent" && len(f) == 2 && k.agent == "":
			if err := checkSubject(f[1]); err != nil {
				return nil, fmt.Errorf("line %d: agent: %v", n, err)
			}
			k.agent = f[1]
		case f[0] == "key" && len(f) == 3:
			id, err := parseKeyID(f[1])
			if err != nil {
				return nil, fmt.Errorf("line %d: key: %v", n, err)
			}
			if k.keys[id] != nil {
				return nil, fmt.Errorf("line %d: key %d a second time", n, id)
			}
			key, err := base64.StdEncoding.Strict().DecodeString(f[2])
			if err != nil || len(key) < minKeyLen || len(key) > maxKeyLen {
				return nil, fmt.Errorf("line %d: key %d: want standard base64 of %d to %d bytes", n, id, minKeyLen, maxKeyLen)
			}
			k.keys[id] = key
		default:
			return nil, fmt.Errorf(`line %d: want one each of "primary ID" and "agent SUBJECT" (optional), and "key ID BASE64" lines`, n)
		}
	}
	switch {
	case !header:
		return nil, fmt.Errorf("empty; want the header %q", keyringHeader)
	case !hasPrimary:
		return nil, errors.New("no primary line")
	case k.keys[k.primary] == nil:
		return nil, fmt.Errorf("primary %d has no key line", k.primary)
	}
	return k, nil
}

func parseKeyID(s string) (uint32, error) {
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil || v == 0 || strconv.FormatUint(v, 10) != s {
		return 0, fmt.Errorf("key IDs are numbers from 1 to %d", uint32(1<<32-1))
	}
	return uint32(v), nil
}

// String describes the keyring by its key IDs: "capability keyring (primary 2, keys [1 2])".
func (k Keyring) String() string {
	s := fmt.Sprintf("capability keyring (primary %d, keys %v", k.primary, k.KeyIDs())
	if k.agent != "" {
		s += ", agent " + k.agent
	}
	return s + ")"
}

// The printing methods have value receivers so that a Keyring value prints the same.

// GoString keeps %#v from printing the keys.
func (k Keyring) GoString() string { return k.String() }

// Format makes every fmt verb print the description, never the keys.
func (k Keyring) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(k.String())) }

// LogValue logs the description.
func (k Keyring) LogValue() slog.Value { return slog.StringValue(k.String()) }
