package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Lease is the broker's record of a secret value handed to a sandbox. It holds no value.
type Lease struct {
	ID         string
	UserID     string
	SandboxID  string
	Capability string
	SecretName string
	IssuedAt   time.Time
	ExpiresAt  time.Time
	// RevokedAt is zero while the lease stands.
	RevokedAt    time.Time
	RevokeReason string
}

const createLeaseSQL = `INSERT INTO leases (id, user_id, sandbox_id, capability, secret_name, issued_at, expires_at)
	VALUES (?, ?, ?, ?, ?, ?, ?)`

// CreateLease records l.
func (tx *Tx) CreateLease(ctx context.Context, l Lease) error {
	_, err := tx.exec(ctx, createLeaseSQL, l.ID, l.UserID, l.SandboxID, l.Capability, l.SecretName, nanos(l.IssuedAt), nanos(l.ExpiresAt))
	if err != nil {
		return fmt.Errorf("create lease: %w", mapErr(err))
	}
	return nil
}

// Lease returns lease id, or ErrNotFound.
func (s *Store) Lease(ctx context.Context, id string) (Lease, error) {
	var l Lease
	var issued, expires, revoked int64
	err := s.queryRow(ctx, `SELECT id, user_id, sandbox_id, capability, secret_name, issued_at, expires_at, revoked_at, revoke_reason
		FROM leases WHERE id = ?`, id).Scan(&l.ID, &l.UserID, &l.SandboxID, &l.Capability, &l.SecretName, &issued, &expires, &revoked, &l.RevokeReason)
	if errors.Is(err, sql.ErrNoRows) {
		return l, fmt.Errorf("lease %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return l, fmt.Errorf("read lease: %w", mapErr(err))
	}
	l.IssuedAt, l.ExpiresAt = fromNanos(issued), fromNanos(expires)
	if revoked != 0 {
		l.RevokedAt = fromNanos(revoked)
	}
	return l, nil
}

// ExtendLease sets a standing lease's expiry.
func (tx *Tx) ExtendLease(ctx context.Context, id string, expires time.Time) error {
	_, err := tx.tx.ExecContext(ctx, `UPDATE leases SET expires_at = ? WHERE id = ? AND revoked_at = 0`, nanos(expires), id)
	if err != nil {
		return fmt.Errorf("extend lease: %w", mapErr(err))
	}
	return nil
}

// RevokeLease revokes lease id, if it stands.
func (tx *Tx) RevokeLease(ctx context.Context, id, reason string, now time.Time) error {
	_, err := tx.tx.ExecContext(ctx, `UPDATE leases SET revoked_at = ?, revoke_reason = ? WHERE id = ? AND revoked_at = 0`, nanos(now), reason, id)
	if err != nil {
		return fmt.Errorf("revoke lease: %w", mapErr(err))
	}
	return nil
}

// RevokeSandboxLeases revokes every standing lease of a sandbox and returns how many.
func (tx *Tx) RevokeSandboxLeases(ctx context.Context, sandboxID, reason string, now time.Time) (int, error) {
	res, err := tx.tx.ExecContext(ctx, `UPDATE leases SET revoked_at = ?, revoke_reason = ? WHERE sandbox_id = ? AND revoked_at = 0`,
		nanos(now), reason, sandboxID)
	if err != nil {
		return 0, fmt.Errorf("revoke leases of sandbox %s: %w", sandboxID, mapErr(err))
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}
