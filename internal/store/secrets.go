package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// SecretRow is a user's secret as stored. The value is there only as ciphertext (package
// secrets encrypts and decrypts it); name, version and times are in the clear.
type SecretRow struct {
	UserID string
	Name   string
	// Version counts the value's changes: 1 when made, +1 on every put.
	Version int64
	// KeyVersion is the keyring version the ciphertext is under.
	KeyVersion int
	Nonce      []byte
	Ciphertext []byte
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// SecretRef names one secret.
type SecretRef struct {
	UserID, Name string
}

// SecretKeyCheck is a known text encrypted under one keyring version: it tells a right
// key from a wrong one before any secret is read or written.
type SecretKeyCheck struct {
	Version   int
	Nonce     []byte
	Check     []byte
	CreatedAt time.Time
}

// querier is what both the read pool and a write transaction answer, so that a read can
// run inside a transaction (to decide what it writes) or outside (not to queue behind
// the writer).
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

const secretCols = `user_id, name, version, key_version, nonce, ciphertext, created_at, updated_at`

func scanSecret(sc scanner) (SecretRow, error) {
	var r SecretRow
	var created, updated int64
	err := sc.Scan(&r.UserID, &r.Name, &r.Version, &r.KeyVersion, &r.Nonce, &r.Ciphertext, &created, &updated)
	r.CreatedAt, r.UpdatedAt = fromNanos(created), fromNanos(updated)
	return r, err
}

func secret(ctx context.Context, q querier, userID, name string) (SecretRow, error) {
	r, err := scanSecret(q.QueryRowContext(ctx, `SELECT `+secretCols+` FROM secrets WHERE user_id = ? AND name = ?`, userID, name))
	if err != nil {
		return SecretRow{}, fmt.Errorf("secret %q: %w", name, mapErr(err))
	}
	return r, nil
}

// Secret returns userID's secret name, or [errdefs.ErrNotFound] (also when another user
// has a secret of that name).
func (s *Store) Secret(ctx context.Context, userID, name string) (SecretRow, error) {
	return secret(ctx, cachedReads{s}, userID, name)
}

// Secret is [Store.Secret] inside the transaction.
func (tx *Tx) Secret(ctx context.Context, userID, name string) (SecretRow, error) {
	return secret(ctx, tx.tx, userID, name)
}

// ListSecrets returns userID's secrets by name, without their ciphertext.
func (s *Store) ListSecrets(ctx context.Context, userID string) ([]SecretRow, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT user_id, name, version, key_version, created_at, updated_at
		FROM secrets WHERE user_id = ? ORDER BY name`, userID)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", mapErr(err))
	}
	defer rows.Close()
	out := []SecretRow{}
	for rows.Next() {
		var r SecretRow
		var created, updated int64
		if err := rows.Scan(&r.UserID, &r.Name, &r.Version, &r.KeyVersion, &created, &updated); err != nil {
			return nil, fmt.Errorf("list secrets: %w", mapErr(err))
		}
		r.CreatedAt, r.UpdatedAt = fromNanos(created), fromNanos(updated)
		out = append(out, r)
	}
	return out, mapErr(rows.Err())
}

// CountSecrets returns how many secrets userID has.
func (tx *Tx) CountSecrets(ctx context.Context, userID string) (int, error) {
	var n int
	err := tx.tx.QueryRowContext(ctx, `SELECT count(*) FROM secrets WHERE user_id = ?`, userID).Scan(&n)
	return n, mapErr(err)
}

// PutSecret inserts r, or replaces the row of the same user and name (its created_at is
// kept). A KeyVersion without a key check is [errdefs.ErrNotFound].
func (tx *Tx) PutSecret(ctx context.Context, r SecretRow) error {
	_, err := tx.tx.ExecContext(ctx, `INSERT INTO secrets (`+secretCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (user_id, name) DO UPDATE SET version = excluded.version, key_version = excluded.key_version,
			nonce = excluded.nonce, ciphertext = excluded.ciphertext, updated_at = excluded.updated_at`,
		r.UserID, r.Name, r.Version, r.KeyVersion, r.Nonce, r.Ciphertext, nanos(r.CreatedAt), nanos(r.UpdatedAt))
	if err != nil {
		return fmt.Errorf("store secret %q: %w", r.Name, mapErr(err))
	}
	return nil
}

// ReencryptSecret replaces the ciphertext of r's row with r's, provided the row still has
// r's version and is still under fromKey: a put or another re-encryption that came first
// wins, and this one is [errdefs.ErrNotFound]. Times are not changed: the value is the same.
func (tx *Tx) ReencryptSecret(ctx context.Context, r SecretRow, fromKey int) error {
	res, err := tx.tx.ExecContext(ctx, `UPDATE secrets SET key_version = ?, nonce = ?, ciphertext = ?
		WHERE user_id = ? AND name = ? AND version = ? AND key_version = ?`,
		r.KeyVersion, r.Nonce, r.Ciphertext, r.UserID, r.Name, r.Version, fromKey)
	return affectedOne(res, err, fmt.Sprintf("secret %q version %d under key %d", r.Name, r.Version, fromKey))
}

// DeleteSecret deletes userID's secret name; [errdefs.ErrNotFound] when there is none.
func (tx *Tx) DeleteSecret(ctx context.Context, userID, name string) error {
	res, err := tx.tx.ExecContext(ctx, `DELETE FROM secrets WHERE user_id = ? AND name = ?`, userID, name)
	return affectedOne(res, err, fmt.Sprintf("secret %q", name))
}

// SecretsNotUnderKey lists every secret (of every user) whose ciphertext is under another
// key version than keyVersion: what a key rotation re-encrypts.
func (tx *Tx) SecretsNotUnderKey(ctx context.Context, keyVersion int) ([]SecretRef, error) {
	rows, err := tx.tx.QueryContext(ctx, `SELECT user_id, name FROM secrets WHERE key_version <> ? ORDER BY user_id, name`, keyVersion)
	if err != nil {
		return nil, fmt.Errorf("list secrets to re-encrypt: %w", mapErr(err))
	}
	defer rows.Close()
	var out []SecretRef
	for rows.Next() {
		var r SecretRef
		if err := rows.Scan(&r.UserID, &r.Name); err != nil {
			return nil, fmt.Errorf("list secrets to re-encrypt: %w", mapErr(err))
		}
		out = append(out, r)
	}
	return out, mapErr(rows.Err())
}

func secretKeyChecks(ctx context.Context, q querier) ([]SecretKeyCheck, error) {
	rows, err := q.QueryContext(ctx, `SELECT version, nonce, check_ct, created_at FROM secret_keys ORDER BY version`)
	if err != nil {
		return nil, fmt.Errorf("read secrets key checks: %w", mapErr(err))
	}
	defer rows.Close()
	var out []SecretKeyCheck
	for rows.Next() {
		var c SecretKeyCheck
		var created int64
		if err := rows.Scan(&c.Version, &c.Nonce, &c.Check, &created); err != nil {
			return nil, fmt.Errorf("read secrets key checks: %w", mapErr(err))
		}
		c.CreatedAt = fromNanos(created)
		out = append(out, c)
	}
	return out, mapErr(rows.Err())
}

// SecretKeyChecks returns the key check of every key version the database has seen.
func (s *Store) SecretKeyChecks(ctx context.Context) ([]SecretKeyCheck, error) {
	return secretKeyChecks(ctx, s.r)
}

// SecretKeyChecks is [Store.SecretKeyChecks] inside the transaction.
func (tx *Tx) SecretKeyChecks(ctx context.Context) ([]SecretKeyCheck, error) {
	return secretKeyChecks(ctx, tx.tx)
}

// AddSecretKeyCheck records the key check of a new key version; a version that has one
// already is [errdefs.ErrAlreadyExists].
func (tx *Tx) AddSecretKeyCheck(ctx context.Context, c SecretKeyCheck) error {
	_, err := tx.tx.ExecContext(ctx, `INSERT INTO secret_keys (version, nonce, check_ct, created_at) VALUES (?, ?, ?, ?)`,
		c.Version, c.Nonce, c.Check, nanos(c.CreatedAt))
	if err != nil {
		return fmt.Errorf("record secrets key version %d: %w", c.Version, mapErr(err))
	}
	return nil
}

func secretKeyUsage(ctx context.Context, q querier) (map[int]int, error) {
	rows, err := q.QueryContext(ctx, `SELECT key_version, count(*) FROM secrets GROUP BY key_version`)
	if err != nil {
		return nil, fmt.Errorf("count secrets by key version: %w", mapErr(err))
	}
	defer rows.Close()
	out := map[int]int{}
	for rows.Next() {
		var v, n int
		if err := rows.Scan(&v, &n); err != nil {
			return nil, fmt.Errorf("count secrets by key version: %w", mapErr(err))
		}
		out[v] = n
	}
	return out, mapErr(rows.Err())
}

// SecretKeyUsage returns how many secrets each key version encrypts (versions that
// encrypt none are absent).
func (s *Store) SecretKeyUsage(ctx context.Context) (map[int]int, error) {
	return secretKeyUsage(ctx, s.r)
}

// SecretKeyUsage is [Store.SecretKeyUsage] inside the transaction.
func (tx *Tx) SecretKeyUsage(ctx context.Context) (map[int]int, error) {
	return secretKeyUsage(ctx, tx.tx)
}
