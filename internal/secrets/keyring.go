package secrets

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// EnvKey is the environment variable that may hold the key instead of a key file:
// standard base64 of 32 random bytes (key version 1), or a whole keyring in the key
// file's format.
const EnvKey = "PADDOCK_SECRETS_KEY"

// KeyFileName is the key file's name in the data dir when the configuration names none.
const KeyFileName = "secrets.key"

// keyringHeader is the key file's first line; the number is the format's version.
const keyringHeader = "paddock-keyring 1"

const (
	keySize = 32 // AES-256
	// maxKeyringBytes bounds what is read from a key file or the environment.
	maxKeyringBytes = 64 << 10
	// maxKeyVersion keeps versions in an SQLite INTEGER and a uint32 of the AD.
	maxKeyVersion = 1<<31 - 1
)

// keyring is the versioned set of key-encryption keys. primary encrypts new values; the
// others decrypt what is still under them. It is never changed once made: a rotation
// makes a new one.
type keyring struct {
	primary int
	keys    map[int][]byte
	aeads   map[int]cipher.AEAD
}

func newKeyring(primary int, keys map[int][]byte) (*keyring, error) {
	k := &keyring{primary: primary, keys: keys, aeads: make(map[int]cipher.AEAD, len(keys))}
	for v, key := range keys {
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, err
		}
		if k.aeads[v], err = cipher.NewGCM(block); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// freshKeyring is a keyring of one new random key.
func freshKeyring(version int) *keyring {
	k, err := newKeyring(version, map[int][]byte{version: randomKey()})
	if err != nil {
		panic(err) // a 32-byte key always makes an AES cipher
	}
	return k
}

func randomKey() []byte {
	key := make([]byte, keySize)
	_, _ = rand.Read(key) // crypto/rand.Read never fails (Go 1.24+)
	return key
}

// withKey returns a copy of k with a new random key at version, made primary.
func (k *keyring) withKey(version int) *keyring {
	keys := maps.Clone(k.keys)
	keys[version] = randomKey()
	n, err := newKeyring(version, keys)
	if err != nil {
		panic(err)
	}
	return n
}

func (k *keyring) has(version int) bool { _, ok := k.aeads[version]; return ok }

func (k *keyring) versions() []int { return slices.Sorted(maps.Keys(k.keys)) }

func (k *keyring) maxVersion() int { return slices.Max(k.versions()) }

// seal encrypts plaintext under version with a fresh random nonce. AES-GCM's 96-bit
// random nonces are safe for 2^32 messages per key; a rotation starts a new key.
func (k *keyring) seal(version int, ad, plaintext []byte) (nonce, ct []byte) {
	a := k.aeads[version]
	nonce = make([]byte, a.NonceSize())
	_, _ = rand.Read(nonce)
	return nonce, a.Seal(nil, nonce, plaintext, ad)
}

// errNoAuth is open's one failure: the key version is unknown, or the ciphertext (or its
// nonce, or the associated data) is not what was sealed.
var errNoAuth = errors.New("message authentication failed")

func (k *keyring) open(version int, nonce, ct, ad []byte) ([]byte, error) {
	a, ok := k.aeads[version]
	if !ok || len(nonce) != a.NonceSize() || len(ct) < a.Overhead() {
		return nil, errNoAuth // Open panics on a wrong nonce size
	}
	pt, err := a.Open(nil, nonce, ct, ad)
	if err != nil {
		return nil, errNoAuth
	}
	return pt, nil
}

// marshal writes k in the key file format, keys in version order.
func (k *keyring) marshal() []byte {
	var b bytes.Buffer
	b.WriteString(`# paddock secrets keyring: the keys that encrypt users' secrets in paddock.db.
# Keep it owner-only (0600) and back it up apart from the database: without it the
# secrets cannot be read; together with the database, it reads them all.
# "primary" encrypts new values. Older keys decrypt what is still under them, and
# database backups from before a rotation: drop a key line only when no database you
# might restore still uses it (paddock refuses to start with a key missing).
`)
	fmt.Fprintf(&b, "%s\nprimary %d\n", keyringHeader, k.primary)
	for _, v := range k.versions() {
		fmt.Fprintf(&b, "key %d %s\n", v, base64.StdEncoding.EncodeToString(k.keys[v]))
	}
	return b.Bytes()
}

// parseKeyring reads the key file format:
//
//	# comments and blank lines are ignored
//	paddock-keyring 1
//	primary 2
//	key 1 <standard base64 of 32 bytes>
//	key 2 <standard base64 of 32 bytes>
//
// The header comes first; then exactly one primary and one or more keys, in any order,
// each version once, the primary among them. Versions are decimal, 1 to 2^31-1, written
// without sign or leading zeros. Errors name the line, never its content: a line may
// hold a key.
func parseKeyring(data []byte) (*keyring, error) {
	if len(data) > maxKeyringBytes {
		return nil, fmt.Errorf("over %d bytes", maxKeyringBytes)
	}
	primary, header := 0, false
	keys := map[int][]byte{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		n := i + 1
		f := strings.Fields(line)
		switch {
		case !header:
			if strings.Join(f, " ") != keyringHeader {
				return nil, fmt.Errorf("line %d: want the header %q first", n, keyringHeader)
			}
			header = true
		case f[0] == "primary" && len(f) == 2:
			if primary != 0 {
				return nil, fmt.Errorf("line %d: a second primary line", n)
			}
			v, err := parseVersion(f[1])
			if err != nil {
				return nil, fmt.Errorf("line %d: primary: %v", n, err)
			}
			primary = v
		case f[0] == "key" && len(f) == 3:
			v, err := parseVersion(f[1])
			if err != nil {
				return nil, fmt.Errorf("line %d: key: %v", n, err)
			}
			if _, dup := keys[v]; dup {
				return nil, fmt.Errorf("line %d: key version %d a second time", n, v)
			}
			key, err := base64.StdEncoding.Strict().DecodeString(f[2])
			if err != nil || len(key) != keySize {
				return nil, fmt.Errorf("line %d: key %d: want standard base64 of %d bytes", n, v, keySize)
			}
			keys[v] = key
		default:
			return nil, fmt.Errorf("line %d: want \"primary VERSION\" or \"key VERSION BASE64\"", n)
		}
	}
	switch {
	case !header:
		return nil, fmt.Errorf("empty; want the header %q", keyringHeader)
	case len(keys) == 0:
		return nil, errors.New("no key line")
	case primary == 0:
		return nil, errors.New("no primary line")
	case keys[primary] == nil:
		return nil, fmt.Errorf("primary %d has no key line", primary)
	}
	return newKeyring(primary, keys)
}

func parseVersion(s string) (int, error) {
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 || v > maxKeyVersion || strconv.Itoa(v) != s {
		return 0, fmt.Errorf("version must be a number from 1 to %d", maxKeyVersion)
	}
	return v, nil
}

// parseEnvKey reads PADDOCK_SECRETS_KEY: a whole keyring, or one base64 key that is
// version 1. The error never quotes the value.
func parseEnvKey(s string) (*keyring, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "paddock-keyring") || strings.HasPrefix(s, "#") {
		return parseKeyring([]byte(s))
	}
	key, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil || len(key) != keySize {
		return nil, fmt.Errorf("want standard base64 of %d random bytes (head -c %d /dev/urandom | base64) or a keyring", keySize, keySize)
	}
	return newKeyring(1, map[int][]byte{1: key})
}

// KeySource says where the keyring comes from: the environment variable when Env is set
// (then File must not exist), the key file otherwise. It prints and logs as that
// description, never as the key.
type KeySource struct {
	// File is the key file. Open creates it, with a fresh key, when it is missing, Env is
	// empty and the database has no secret yet.
	File string
	// Env is PADDOCK_SECRETS_KEY's value; empty when unset.
	Env string
}

// KeySourceFromEnv is file, or PADDOCK_SECRETS_KEY when it is set.
func KeySourceFromEnv(file string) KeySource {
	return KeySource{File: file, Env: os.Getenv(EnvKey)}
}

// String names the source: "key file /path" or "environment variable PADDOCK_SECRETS_KEY".
func (k KeySource) String() string {
	if k.Env != "" {
		return "environment variable " + EnvKey
	}
	return "key file " + k.File
}

// GoString keeps %#v from printing the key.
func (k KeySource) GoString() string { return k.String() }

// Format keeps every verb (%v, %+v, %x, …) from printing the key.
func (k KeySource) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(k.String())) }

// load reads the keyring; nil, with no error, when the key file does not exist and no
// environment key is set.
func (k KeySource) load() (*keyring, error) {
	if k.Env != "" {
		if k.File != "" {
			if _, err := os.Lstat(k.File); err == nil {
				return nil, fmt.Errorf("both %s and the key file %s are set: remove one (keep the one this database was written with): %w",
					EnvKey, k.File, errdefs.ErrFailedPrecondition)
			}
		}
		ring, err := parseEnvKey(k.Env)
		if err != nil {
			return nil, fmt.Errorf("%s: %v: %w", EnvKey, err, errdefs.ErrInvalidArgument)
		}
		return ring, nil
	}
	if k.File == "" {
		return nil, fmt.Errorf("secrets: no key file and no %s: %w", EnvKey, errdefs.ErrInvalidArgument)
	}
	f, err := os.Open(k.File)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("key file %s is not a regular file: %w", k.File, errdefs.ErrFailedPrecondition)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("key file %s has mode %04o: others may read the secrets key; chmod 600 %s and start again: %w",
			k.File, perm, k.File, errdefs.ErrFailedPrecondition)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKeyringBytes+1))
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", k.File, err)
	}
	ring, err := parseKeyring(data)
	if err != nil {
		return nil, fmt.Errorf("key file %s: %v: %w", k.File, err, errdefs.ErrInvalidArgument)
	}
	return ring, nil
}

// write stores ring in the key file, durably: a temporary file in the same directory is
// written, synced and then renamed over the file (or, with exclusive, linked to it, which
// fails when the file exists: two first starts cannot both make a key). The directory is
// synced, so a crash leaves the old keyring or the new, never a torn one.
func (k KeySource) write(ring *keyring, exclusive bool) error {
	dir := filepath.Dir(k.File)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("key file directory: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".secrets-key-*") // 0600
	if err != nil {
		return fmt.Errorf("write key file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(ring.marshal()); err != nil {
		tmp.Close()
		return fmt.Errorf("write key file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write key file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write key file: %w", err)
	}
	if exclusive {
		err = os.Link(tmp.Name(), k.File)
	} else {
		err = os.Rename(tmp.Name(), k.File)
	}
	if err != nil {
		return fmt.Errorf("write key file %s: %w", k.File, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync key file directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync key file directory: %w", err)
	}
	return nil
}
