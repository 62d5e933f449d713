package secrets

import (
	"context"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/store"
)

// Limits on what a user may store.
const (
	// MaxValueSize bounds one value (api.MaxSecretSize).
	MaxValueSize = api.MaxSecretSize
	// MaxNameLen bounds a name (api.MaxSecretNameLen).
	MaxNameLen = api.MaxSecretNameLen
	// MaxPerUser bounds how many secrets one user has.
	MaxPerUser = 100
)

// Info describes a secret without its value.
type Info struct {
	Name string
	// Version is 1 when the secret was made and grows by one on every Put.
	Version   int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Rotation says what RotateKey did.
type Rotation struct {
	// From and To are the primary key versions before and after.
	From, To int
	// Reencrypted counts the secrets re-encrypted under To.
	Reencrypted int
	// Retained are the older versions the key file keeps (see the package doc).
	Retained []int
	// KeyFile is the key file that now holds To.
	KeyFile string
}

// Secrets is the users' secrets store. It is safe for concurrent use.
type Secrets struct {
	st  *store.Store
	src KeySource
	log *slog.Logger
	now func() time.Time

	mu   sync.Mutex
	ring *keyring // replaced whole, never changed
	// seen is the newest key version of the database that ring was reconciled with: a
	// newer one means another process rotated, and the key file is read again.
	seen int

	rows rowCache // sealed rows Get read lately
}

// Open checks the keyring in keys against the database and returns the store. On a first
// start (no key file, no environment key, no secret in the database) it makes the key
// file with a fresh key. A key that is not the one the database's secrets were written
// with, or a keyring that lacks a version they use, is refused with
// [errdefs.ErrFailedPrecondition] and a message that names the key's source and what to
// do: nothing is read or written with a wrong key.
func Open(ctx context.Context, st *store.Store, keys KeySource, log *slog.Logger) (*Secrets, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Secrets{st: st, src: keys, log: log, now: time.Now}
	var created bool
	var stale int
	err := st.Update(ctx, func(tx *store.Tx) error {
		checks, usage, err := keyState(ctx, tx)
		if err != nil {
			return err
		}
		ring, err := keys.load()
		if err != nil {
			return err
		}
		if ring == nil {
			if ring, created, err = s.firstKey(checks, usage); err != nil {
				return err
			}
		}
		if err := s.verify(ring, checks, usage); err != nil {
			return err
		}
		if err := s.addChecks(ctx, tx, ring, checks); err != nil {
			return err
		}
		for v, n := range usage {
			if v != ring.primary {
				stale += n
			}
		}
		s.ring, s.seen = ring, max(maxCheck(checks), ring.maxVersion())
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	if created {
		log.Warn("made a new secrets key file: back it up apart from the database; without it the secrets cannot be read", "path", keys.File)
	}
	if stale > 0 {
		log.Info("secrets under older key versions are re-encrypted under the primary when next read", "count", stale, "primary", s.ring.primary)
	}
	return s, nil
}

func keyState(ctx context.Context, tx *store.Tx) ([]store.SecretKeyCheck, map[int]int, error) {
	checks, err := tx.SecretKeyChecks(ctx)
	if err != nil {
		return nil, nil, err
	}
	usage, err := tx.SecretKeyUsage(ctx)
	return checks, usage, err
}

// firstKey makes the key file of a first start. When the database already holds secrets
// it refuses: a new key could never read them, and the missing file is the operator's
// to restore.
func (s *Secrets) firstKey(checks []store.SecretKeyCheck, usage map[int]int) (*keyring, bool, error) {
	if n := total(usage); n > 0 {
		return nil, false, fmt.Errorf("the key file %s does not exist, but the database %s holds %d secrets encrypted under key versions %v: "+
			"restore the key file from the backup taken with the database (or set %s to its key); a new key could never read them: %w",
			s.src.File, s.st.Path(), n, sortedKeys(usage), EnvKey, errdefs.ErrFailedPrecondition)
	}
	ring := freshKeyring(maxCheck(checks) + 1) // a version the database has not seen
	err := s.src.write(ring, true)
	if errors.Is(err, os.ErrExist) { // another process made it first
		ring, err = s.src.load()
		if err == nil && ring == nil {
			err = fmt.Errorf("key file %s vanished while starting: %w", s.src.File, errdefs.ErrUnavailable)
		}
		return ring, false, err
	}
	return ring, err == nil, err
}

// verify refuses a keyring that does not fit the database: a version whose key check does
// not decrypt (a wrong key), or a version that secrets use and the keyring lacks.
func (s *Secrets) verify(ring *keyring, checks []store.SecretKeyCheck, usage map[int]int) error {
	for _, c := range checks {
		if !ring.has(c.Version) {
			continue
		}
		pt, err := ring.open(c.Version, c.Nonce, c.Check, checkAD(c.Version))
		if err != nil || subtle.ConstantTimeCompare(pt, []byte(checkText)) != 1 {
			return fmt.Errorf("key version %d in the %s is not the key the database %s was written with: "+
				"use the key file (or %s) that belongs to this database, from the backup taken with it; "+
				"paddock refuses a wrong key rather than read garbage or write secrets the right key could not read: %w",
				c.Version, s.src, s.st.Path(), EnvKey, errdefs.ErrFailedPrecondition)
		}
	}
	for _, v := range sortedKeys(usage) {
		if !ring.has(v) {
			return fmt.Errorf("%d secrets in the database %s are encrypted under key version %d, which the %s does not have: "+
				"put back its \"key %d …\" line from the keyring backed up with this database: %w",
				usage[v], s.st.Path(), v, s.src, v, errdefs.ErrFailedPrecondition)
		}
	}
	return nil
}

// addChecks records a key check for each version of ring the database has none of.
func (s *Secrets) addChecks(ctx context.Context, tx *store.Tx, ring *keyring, checks []store.SecretKeyCheck) error {
	have := map[int]bool{}
	for _, c := range checks {
		have[c.Version] = true
	}
	for _, v := range ring.versions() {
		if have[v] {
			continue
		}
		nonce, ct := ring.seal(v, checkAD(v), []byte(checkText))
		if err := tx.AddSecretKeyCheck(ctx, store.SecretKeyCheck{Version: v, Nonce: nonce, Check: ct, CreatedAt: s.now()}); err != nil {
			return err
		}
	}
	return nil
}

func (s *Secrets) keyring() *keyring {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ring
}

// refresh re-reads the keyring, which another process (`paddock secrets rotate-key`) may
// have rotated, and takes it if it fits the database.
func (s *Secrets) refresh(checks []store.SecretKeyCheck) (*keyring, error) {
	ring, err := s.src.load()
	if err == nil && ring == nil {
		err = fmt.Errorf("the key file %s has gone: restore it: %w", s.src.File, errdefs.ErrFailedPrecondition)
	}
	if err != nil {
		return nil, err
	}
	if err := s.verify(ring, checks, nil); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.ring, s.seen = ring, max(s.seen, maxCheck(checks))
	s.mu.Unlock()
	return ring, nil
}

// ringWith returns a keyring that has version, re-reading the key file when the one in
// memory does not.
func (s *Secrets) ringWith(ctx context.Context, name string, version int) (*keyring, error) {
	if ring := s.keyring(); ring.has(version) {
		return ring, nil
	}
	checks, err := s.st.SecretKeyChecks(ctx)
	if err != nil {
		return nil, err
	}
	ring, err := s.refresh(checks)
	if err != nil {
		return nil, err
	}
	if !ring.has(version) {
		return nil, fmt.Errorf("secret %q is encrypted under key version %d, which the %s does not have: "+
			"put back its \"key %d …\" line from the keyring backed up with this database: %w",
			name, version, s.src, version, errdefs.ErrFailedPrecondition)
	}
	return ring, nil
}

// Put stores value as userID's secret name: a new secret at version 1, or the next
// version of an existing one. The change is in the audit log (name and version, never
// the value) in the same transaction.
func (s *Secrets) Put(ctx context.Context, userID, name string, value []byte) (Info, error) {
	if err := ValidateName(name); err != nil {
		return Info{}, err
	}
	switch {
	case len(value) == 0:
		return Info{}, fmt.Errorf("secret %q: the value is empty; delete the secret instead: %w", name, errdefs.ErrInvalidArgument)
	case len(value) > MaxValueSize:
		return Info{}, fmt.Errorf("secret %q: the value is %d bytes, over the limit of %d (64 KiB): %w", name, len(value), MaxValueSize, errdefs.ErrInvalidArgument)
	}
	var info Info
	defer s.rows.drop(userID, name)
	err := s.st.Update(ctx, func(tx *store.Tx) error {
		ring, err := s.current(ctx, tx)
		if err != nil {
			return err
		}
		now := s.now()
		row := store.SecretRow{UserID: userID, Name: name, Version: 1, CreatedAt: now, UpdatedAt: now}
		old, err := tx.Secret(ctx, userID, name)
		switch {
		case err == nil:
			row.Version, row.CreatedAt = old.Version+1, old.CreatedAt
		case !errors.Is(err, errdefs.ErrNotFound):
			return err
		default:
			n, err := tx.CountSecrets(ctx, userID)
			if err != nil {
				return err
			}
			if n >= MaxPerUser {
				return fmt.Errorf("secret %q: you have %d secrets, the most one user may have; delete one first: %w", name, n, errdefs.ErrLimitExceeded)
			}
		}
		row.KeyVersion = ring.primary
		row.Nonce, row.Ciphertext = ring.seal(ring.primary, secretAD(userID, name, row.Version), value)
		if err := tx.PutSecret(ctx, row); err != nil {
			return err
		}
		info = infoOf(row)
		return tx.AppendAudit(ctx, store.AuditEvent{At: now, ActorUserID: userID, Action: "secret.put", Target: name,
			Detail: map[string]any{"version": row.Version}})
	})
	if err != nil {
		return Info{}, err
	}
	return info, nil
}

// current returns the keyring to encrypt with: the one in memory, unless the database
// has seen a newer key version (a rotation by another process), then the key file's.
func (s *Secrets) current(ctx context.Context, tx *store.Tx) (*keyring, error) {
	checks, err := tx.SecretKeyChecks(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	ring, seen := s.ring, s.seen
	s.mu.Unlock()
	if maxCheck(checks) <= seen {
		return ring, nil
	}
	return s.refresh(checks)
}

// Get returns userID's secret name and its description; [errdefs.ErrNotFound] when there
// is none. A ciphertext that does not decrypt (altered, truncated, or moved from another
// row) is [errdefs.ErrDataLoss]. A value still under an older key version is re-encrypted
// under the primary on the way.
func (s *Secrets) Get(ctx context.Context, userID, name string) (Value, Info, error) {
	if err := ValidateName(name); err != nil {
		return Value{}, Info{}, err
	}
	now := time.Now()
	row, gen, ok := s.rows.get(userID, name, now)
	if !ok {
		var err error
		if row, err = s.st.Secret(ctx, userID, name); err != nil {
			return Value{}, Info{}, err
		}
		s.rows.put(row, gen, now)
	}
	ring, err := s.ringWith(ctx, name, row.KeyVersion)
	if err != nil {
		return Value{}, Info{}, err
	}
	pt, err := ring.open(row.KeyVersion, row.Nonce, row.Ciphertext, secretAD(userID, name, row.Version))
	if err != nil {
		s.rows.drop(userID, name)
		return Value{}, Info{}, dataLoss(row)
	}
	if row.KeyVersion != ring.primary {
		s.reencrypt(ctx, ring, row, pt)
	}
	return Value{b: pt}, infoOf(row), nil
}

// reencrypt moves row under ring's primary key, unless a put came first. A failure only
// costs a later retry, so it is logged, not returned.
func (s *Secrets) reencrypt(ctx context.Context, ring *keyring, row store.SecretRow, pt []byte) {
	defer s.rows.drop(row.UserID, row.Name)
	from := row.KeyVersion
	row.KeyVersion = ring.primary
	row.Nonce, row.Ciphertext = ring.seal(ring.primary, secretAD(row.UserID, row.Name, row.Version), pt)
	err := s.st.Update(ctx, func(tx *store.Tx) error { return tx.ReencryptSecret(ctx, row, from) })
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		s.log.WarnContext(ctx, "re-encrypting a secret under the primary key", "user_id", row.UserID, "name", row.Name, "err", err)
	}
}

// List returns userID's secrets by name, never their values.
func (s *Secrets) List(ctx context.Context, userID string) ([]Info, error) {
	rows, err := s.st.ListSecrets(ctx, userID)
	if err != nil {
		return nil, err
	}
	out := make([]Info, 0, len(rows))
	for _, r := range rows {
		out = append(out, infoOf(r))
	}
	return out, nil
}

// Delete deletes userID's secret name; [errdefs.ErrNotFound] when there is none. The
// deletion is in the audit log.
func (s *Secrets) Delete(ctx context.Context, userID, name string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	defer s.rows.drop(userID, name)
	return s.st.Update(ctx, func(tx *store.Tx) error {
		row, err := tx.Secret(ctx, userID, name)
		if err != nil {
			return err
		}
		if err := tx.DeleteSecret(ctx, userID, name); err != nil {
			return err
		}
		return tx.AppendAudit(ctx, store.AuditEvent{At: s.now(), ActorUserID: userID, Action: "secret.delete", Target: name,
			Detail: map[string]any{"version": row.Version}})
	})
}

// RotateKey adds a new key version to the key file, makes it primary, and re-encrypts
// every secret under it, in one transaction: it commits all of them or none. The key file
// is written first (inside the transaction, which also keeps two rotations from
// interleaving), so no committed row is ever under a key that is not on disk; if the
// transaction then fails, the file merely has a primary that nothing uses yet. Older
// versions stay in the file (see the package doc). A key from PADDOCK_SECRETS_KEY
// cannot be rotated: paddock cannot rewrite the environment.
func (s *Secrets) RotateKey(ctx context.Context) (Rotation, error) {
	if s.src.Env != "" {
		return Rotation{}, fmt.Errorf("the secrets key comes from %s, which paddock cannot rewrite: to rotate, put the key in a key file "+
			"(umask 077; printf 'paddock-keyring 1\\nprimary 1\\nkey 1 %%s\\n' \"$%s\" > %s), unset %s and rotate again: %w",
			EnvKey, EnvKey, s.src.File, EnvKey, errdefs.ErrFailedPrecondition)
	}
	var rot Rotation
	var next *keyring
	defer s.rows.clear()
	err := s.st.Update(ctx, func(tx *store.Tx) error {
		checks, usage, err := keyState(ctx, tx)
		if err != nil {
			return err
		}
		ring, err := s.src.load()
		if err == nil && ring == nil {
			err = fmt.Errorf("the key file %s has gone: restore it before rotating: %w", s.src.File, errdefs.ErrFailedPrecondition)
		}
		if err != nil {
			return err
		}
		if err := s.verify(ring, checks, usage); err != nil {
			return err
		}
		to := max(ring.maxVersion(), maxCheck(checks)) + 1
		if to > maxKeyVersion {
			return fmt.Errorf("key versions are used up (%d): %w", maxKeyVersion, errdefs.ErrLimitExceeded)
		}
		next = ring.withKey(to)
		if err := s.src.write(next, false); err != nil {
			return err
		}
		if err := s.addChecks(ctx, tx, next, checks); err != nil {
			return err
		}
		rot = Rotation{From: ring.primary, To: to, KeyFile: s.src.File}
		if rot.Reencrypted, err = s.reencryptAll(ctx, tx, next); err != nil {
			return err
		}
		if _, err := s.reencryptShared(ctx, tx, next); err != nil {
			return err
		}
		rot.Retained = slices.DeleteFunc(next.versions(), func(v int) bool { return v == to })
		return tx.AppendAudit(ctx, store.AuditEvent{At: s.now(), Action: "secrets.key.rotate",
			Detail: map[string]any{"from": rot.From, "to": rot.To, "reencrypted": rot.Reencrypted}})
	})
	if err != nil {
		return Rotation{}, fmt.Errorf("rotate the secrets key: %w", err)
	}
	s.mu.Lock()
	s.ring, s.seen = next, max(s.seen, rot.To)
	s.mu.Unlock()
	s.log.Info("rotated the secrets key", "from", rot.From, "to", rot.To, "reencrypted", rot.Reencrypted, "key_file", rot.KeyFile)
	return rot, nil
}

// reencryptAll moves every secret not under ring's primary under it. A secret that does
// not decrypt stops the rotation: it is named, with its owner, for the operator.
func (s *Secrets) reencryptAll(ctx context.Context, tx *store.Tx, ring *keyring) (int, error) {
	refs, err := tx.SecretsNotUnderKey(ctx, ring.primary)
	if err != nil {
		return 0, err
	}
	for _, ref := range refs {
		row, err := tx.Secret(ctx, ref.UserID, ref.Name)
		if err != nil {
			return 0, err
		}
		pt, err := ring.open(row.KeyVersion, row.Nonce, row.Ciphertext, secretAD(row.UserID, row.Name, row.Version))
		if err != nil {
			return 0, fmt.Errorf("user %s: %w (delete it, or restore it, and rotate again)", row.UserID, dataLoss(row))
		}
		from := row.KeyVersion
		row.KeyVersion = ring.primary
		row.Nonce, row.Ciphertext = ring.seal(ring.primary, secretAD(row.UserID, row.Name, row.Version), pt)
		if err := tx.ReencryptSecret(ctx, row, from); err != nil {
			return 0, err
		}
	}
	return len(refs), nil
}

// ValidateName checks a secret's name (api.ValidateSecretName).
func ValidateName(name string) error { return api.ValidateSecretName(name) }

func infoOf(r store.SecretRow) Info {
	return Info{Name: r.Name, Version: r.Version, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

// dataLoss is the error for a row whose ciphertext does not decrypt with the key it
// names. It names the secret, never the value (which is gone).
func dataLoss(r store.SecretRow) error {
	return fmt.Errorf("secret %q (version %d): the stored ciphertext does not decrypt under key version %d: "+
		"it was altered, truncated or copied from another secret; the value is lost unless a backup of the database has it: %w",
		r.Name, r.Version, r.KeyVersion, errdefs.ErrDataLoss)
}

// Associated data: a domain string, then each field length-prefixed (or fixed-size), so
// that no two different (user, name, version) triples encode alike, and a secret's AD can
// never equal a key check's.
const (
	adSecret  = "paddock secret v1\x00"
	adCheck   = "paddock secrets key check v1\x00"
	checkText = "paddock secrets key check"
)

func secretAD(userID, name string, version int64) []byte {
	b := make([]byte, 0, len(adSecret)+4+len(userID)+4+len(name)+8)
	b = append(b, adSecret...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(userID)))
	b = append(b, userID...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(name)))
	b = append(b, name...)
	return binary.BigEndian.AppendUint64(b, uint64(version))
}

func checkAD(version int) []byte {
	return binary.BigEndian.AppendUint32([]byte(adCheck), uint32(version))
}

func maxCheck(checks []store.SecretKeyCheck) int {
	m := 0
	for _, c := range checks {
		m = max(m, c.Version)
	}
	return m
}

func total(usage map[int]int) int {
	n := 0
	for _, c := range usage {
		n += c
	}
	return n
}

func sortedKeys(m map[int]int) []int { return slices.Sorted(maps.Keys(m)) }
