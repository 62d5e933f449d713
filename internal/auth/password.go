package auth

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/crypto/argon2"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Params are Argon2id cost parameters.
type Params struct {
	Memory  uint32 // KiB
	Time    uint32 // passes
	Threads uint8
	SaltLen uint32 // bytes
	KeyLen  uint32 // bytes
}

// DefaultParams: 32 MiB, 2 passes, 1 lane, 16-byte salt, 32-byte key. That is above
// OWASP's floor (19 MiB, 2 passes) and keeps a hash inside a 50-100 ms budget on small
// hosts (BenchmarkHashPassword measures it). One lane, because the server hashes for many
// users at once. The memory (32 MiB per concurrent hash) is why hashing is also capped by
// a semaphore.
// The parameters are stored with every hash, so raising them later rehashes each
// password at its owner's next login ([NeedsRehash]).
var DefaultParams = Params{Memory: 32 * 1024, Time: 2, Threads: 1, SaltLen: 16, KeyLen: 32}

// Password policy bounds.
const (
	MinPasswordLen = 12   // characters
	MaxPasswordLen = 1024 // bytes: bounds the work an attacker can make us hash
)

// Bounds a stored hash must respect to be verified at all, so that a corrupted or
// planted hash string cannot make one verification allocate gigabytes.
const (
	maxMemory  = 1 << 20 // KiB (1 GiB)
	maxTime    = 64
	minSaltLen = 8
	maxSaltLen = 64
	minKeyLen  = 16
	maxKeyLen  = 64
)

var b64 = base64.RawStdEncoding // the PHC string format's base64: standard alphabet, no padding

// decodeB64 decodes one base64 field of a PHC string, and only its canonical encoding:
// encoding/base64 skips \r and \n anywhere in its input, so a field with a line break in it
// would otherwise decode like the field without (found by FuzzParsePHC).
func decodeB64(s string) ([]byte, error) {
	b, err := b64.Strict().DecodeString(s)
	if err != nil {
		return nil, err
	}
	if b64.EncodeToString(b) != s {
		return nil, errors.New("not canonical base64")
	}
	return b, nil
}

// HashPassword hashes pw with p into the PHC string format
// "$argon2id$v=19$m=<KiB>,t=<passes>,p=<lanes>$<salt>$<key>".
func HashPassword(pw Password, p Params) string {
	salt := make([]byte, p.SaltLen)
	_, _ = rand.Read(salt) // never fails since Go 1.24
	key := argon2.IDKey([]byte(pw), salt, p.Time, p.Memory, p.Threads, p.KeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s",
		argon2.Version, p.Memory, p.Time, p.Threads, b64.EncodeToString(salt), b64.EncodeToString(key))
}

// phc is a parsed Argon2id PHC string.
type phc struct {
	params    Params
	salt, key []byte
}

// parsePHC parses an Argon2id PHC string, rejecting anything malformed or outside
// sane bounds with [errdefs.ErrInvalidArgument].
func parsePHC(s string) (phc, error) {
	bad := func(why string) (phc, error) {
		return phc{}, fmt.Errorf("password hash: %s: %w", why, errdefs.ErrInvalidArgument)
	}
	parts := strings.Split(s, "$")
	if len(parts) != 6 || parts[0] != "" {
		return bad("not a PHC string")
	}
	if parts[1] != "argon2id" {
		return bad("algorithm is not argon2id")
	}
	if parts[2] != "v="+strconv.Itoa(argon2.Version) {
		return bad("unsupported argon2 version")
	}
	var h phc
	m, t, p, err := parseParams(parts[3])
	if err != nil {
		return bad(err.Error())
	}
	if h.salt, err = decodeB64(parts[4]); err != nil || len(h.salt) < minSaltLen || len(h.salt) > maxSaltLen {
		return bad("bad salt")
	}
	if h.key, err = decodeB64(parts[5]); err != nil || len(h.key) < minKeyLen || len(h.key) > maxKeyLen {
		return bad("bad key")
	}
	h.params = Params{Memory: m, Time: t, Threads: p, SaltLen: uint32(len(h.salt)), KeyLen: uint32(len(h.key))}
	return h, nil
}

// parseParams parses "m=<n>,t=<n>,p=<n>" in that order, the only order this
// package writes.
func parseParams(s string) (m, t uint32, p uint8, err error) {
	kv := strings.Split(s, ",")
	if len(kv) != 3 {
		return 0, 0, 0, fmt.Errorf("want m=,t=,p=")
	}
	var vals [3]uint64
	for i, name := range []string{"m=", "t=", "p="} {
		digits, ok := strings.CutPrefix(kv[i], name)
		if !ok || digits == "" || (len(digits) > 1 && digits[0] == '0') {
			return 0, 0, 0, fmt.Errorf("want m=,t=,p=")
		}
		if vals[i], err = strconv.ParseUint(digits, 10, 32); err != nil {
			return 0, 0, 0, fmt.Errorf("bad %s", name)
		}
	}
	m, t = uint32(vals[0]), uint32(vals[1])
	if vals[2] < 1 || vals[2] > 255 || t < 1 || t > maxTime || m < 8*uint32(vals[2]) || m > maxMemory {
		return 0, 0, 0, fmt.Errorf("parameters out of range")
	}
	return m, t, uint8(vals[2]), nil
}

// VerifyPassword reports whether pw matches the PHC string encoded, with the
// parameters recorded in it. The comparison is constant-time. A malformed hash is
// an error, never a match.
func VerifyPassword(encoded string, pw Password) (bool, error) {
	h, err := parsePHC(encoded)
	if err != nil {
		return false, err
	}
	if len(pw) > MaxPasswordLen {
		return false, nil
	}
	key := argon2.IDKey([]byte(pw), h.salt, h.params.Time, h.params.Memory, h.params.Threads, uint32(len(h.key)))
	return subtle.ConstantTimeCompare(key, h.key) == 1, nil
}

// NeedsRehash reports whether encoded was made with parameters other than p (or
// cannot be parsed), so the password should be hashed again at the next login.
func NeedsRehash(encoded string, p Params) bool {
	h, err := parsePHC(encoded)
	return err != nil || h.params != p
}

// CheckPasswordPolicy returns an [errdefs.ErrInvalidArgument] error saying what is
// wrong with pw as a new password for username, or nil: too short or long, the
// username, or guessable (see checkGuessable). It never echoes pw.
func CheckPasswordPolicy(username string, pw Password) error {
	s := string(pw)
	switch {
	case len(s) > MaxPasswordLen:
		return fmt.Errorf("password is too long: at most %d bytes: %w", MaxPasswordLen, errdefs.ErrInvalidArgument)
	case !utf8.ValidString(s):
		return fmt.Errorf("password is not valid UTF-8 text: %w", errdefs.ErrInvalidArgument)
	case utf8.RuneCountInString(s) < MinPasswordLen:
		return fmt.Errorf("password is too short: use at least %d characters (a few unrelated words work well): %w", MinPasswordLen, errdefs.ErrInvalidArgument)
	case strings.EqualFold(strings.TrimSpace(s), username):
		return fmt.Errorf("password must not be the username: %w", errdefs.ErrInvalidArgument)
	}
	return checkGuessable(s)
}

// CheckUsername returns an [errdefs.ErrInvalidArgument] error saying what is wrong
// with name as a username, or nil. Usernames are 3 to 32 ASCII letters, digits, '.',
// '_' or '-', starting with a letter or digit; ASCII-only keeps "same name ignoring
// case" exact (the store compares with SQLite's ASCII NOCASE) and rules out
// look-alike Unicode names.
func CheckUsername(name string) error {
	if len(name) < 3 || len(name) > 32 {
		return fmt.Errorf("username must be 3 to 32 characters: %w", errdefs.ErrInvalidArgument)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || (c != '.' && c != '_' && c != '-')) {
			return fmt.Errorf("username may contain only letters, digits, '.', '_' and '-', and must start with a letter or digit: %w", errdefs.ErrInvalidArgument)
		}
	}
	return nil
}
