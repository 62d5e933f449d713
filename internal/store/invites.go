package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Invite is a registration invite: a code an admin hands out, good for MaxUses
// registrations until ExpiresAt. Only the code's SHA-256 is stored.
type Invite struct {
	ID        string
	CodeHash  []byte
	Prefix    string // the code's first characters, to tell invites apart in a list
	CreatedBy string // the admin's user ID
	CreatedAt time.Time
	ExpiresAt time.Time
	MaxUses   int
	Uses      int
	RevokedAt time.Time // zero while valid
}

const inviteCols = `id, code_hash, prefix, created_by, created_at, expires_at, max_uses, uses, revoked_at`

func scanInvite(sc scanner) (Invite, error) {
	var in Invite
	var created, expires int64
	var revoked sql.NullInt64
	err := sc.Scan(&in.ID, &in.CodeHash, &in.Prefix, &in.CreatedBy, &created, &expires, &in.MaxUses, &in.Uses, &revoked)
	in.CreatedAt, in.ExpiresAt, in.RevokedAt = fromNanos(created), fromNanos(expires), fromNullNanos(revoked)
	return in, err
}

// CreateInvite stores in (ID generated when empty) and returns it.
func (tx *Tx) CreateInvite(ctx context.Context, in Invite) (Invite, error) {
	if in.ID == "" {
		in.ID = NewID()
	}
	_, err := tx.tx.ExecContext(ctx, `INSERT INTO invites (id, code_hash, prefix, created_by, created_at, expires_at, max_uses) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		in.ID, in.CodeHash, in.Prefix, in.CreatedBy, nanos(in.CreatedAt), nanos(in.ExpiresAt), in.MaxUses)
	if err != nil {
		return Invite{}, fmt.Errorf("create invite: %w", mapErr(err))
	}
	return in, nil
}

// RedeemInvite uses the standing invite with codeHash once and returns it;
// [errdefs.ErrNotFound] when there is none (unknown, used up, expired or revoked). One
// conditional UPDATE, so concurrent registrations cannot use an invite more often than
// it allows.
func (tx *Tx) RedeemInvite(ctx context.Context, codeHash []byte, now time.Time) (Invite, error) {
	in, err := scanInvite(tx.tx.QueryRowContext(ctx, `UPDATE invites SET uses = uses + 1
		WHERE code_hash = ? AND revoked_at IS NULL AND expires_at > ? AND uses < max_uses
		RETURNING `+inviteCols, codeHash, nanos(now)))
	if err != nil {
		return Invite{}, fmt.Errorf("invite: %w", mapErr(err))
	}
	return in, nil
}

// ListInvites returns every invite, newest first.
func (s *Store) ListInvites(ctx context.Context) ([]Invite, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+inviteCols+` FROM invites ORDER BY created_at DESC, id`)
	if err != nil {
		return nil, fmt.Errorf("list invites: %w", mapErr(err))
	}
	defer rows.Close()
	var out []Invite
	for rows.Next() {
		in, err := scanInvite(rows)
		if err != nil {
			return nil, fmt.Errorf("list invites: %w", mapErr(err))
		}
		out = append(out, in)
	}
	return out, mapErr(rows.Err())
}

// RevokeInvite revokes a standing invite; an unknown or revoked one is
// [errdefs.ErrNotFound].
func (tx *Tx) RevokeInvite(ctx context.Context, id string, now time.Time) error {
	res, err := tx.tx.ExecContext(ctx, `UPDATE invites SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`, nanos(now), id)
	return affectedOne(res, err, "invite "+id)
}
