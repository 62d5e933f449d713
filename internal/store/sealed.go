package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// SealedValue is a value of the server's own, sealed under the secrets keyring (package
// secrets seals and opens it): what every replica of one database shares.
type SealedValue struct {
	Name       string
	KeyVersion int
	Nonce      []byte
	Ciphertext []byte
	CreatedAt  time.Time
}

// SealedValue returns value name; [errdefs.ErrNotFound] when there is none.
func (tx *Tx) SealedValue(ctx context.Context, name string) (SealedValue, error) {
	v := SealedValue{Name: name}
	var created int64
	err := tx.tx.QueryRowContext(ctx, `SELECT key_version, nonce, ciphertext, created_at FROM sealed_values WHERE name = ?`, name).
		Scan(&v.KeyVersion, &v.Nonce, &v.Ciphertext, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return v, fmt.Errorf("sealed value %s: %w", name, errdefs.ErrNotFound)
	}
	if err != nil {
		return v, fmt.Errorf("sealed value %s: %w", name, mapErr(err))
	}
	v.CreatedAt = fromNanos(created)
	return v, nil
}

// PutSealedValue stores v, replacing the value of its name.
func (tx *Tx) PutSealedValue(ctx context.Context, v SealedValue) error {
	_, err := tx.tx.ExecContext(ctx, `INSERT INTO sealed_values (name, key_version, nonce, ciphertext, created_at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET key_version = excluded.key_version, nonce = excluded.nonce, ciphertext = excluded.ciphertext`,
		v.Name, v.KeyVersion, v.Nonce, v.Ciphertext, nanos(v.CreatedAt))
	if err != nil {
		return fmt.Errorf("store sealed value %s: %w", v.Name, mapErr(err))
	}
	return nil
}

// SealedNotUnderKey lists the names of the sealed values under another key version than
// keyVersion: what a key rotation re-encrypts.
func (tx *Tx) SealedNotUnderKey(ctx context.Context, keyVersion int) ([]string, error) {
	rows, err := tx.tx.QueryContext(ctx, `SELECT name FROM sealed_values WHERE key_version <> ? ORDER BY name`, keyVersion)
	if err != nil {
		return nil, fmt.Errorf("list sealed values to re-encrypt: %w", mapErr(err))
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("list sealed values to re-encrypt: %w", mapErr(err))
		}
		out = append(out, n)
	}
	return out, mapErr(rows.Err())
}
