package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// APIToken is a long-lived bearer token for the CLI and SDKs. Only its SHA-256 is stored.
type APIToken struct {
	ID         string
	UserID     string
	Name       string
	TokenHash  []byte
	Prefix     string // the token's first characters, to tell tokens apart in a list
	CreatedAt  time.Time
	LastUsedAt time.Time // zero when never used
	RevokedAt  time.Time // zero while valid
	// ExpiresAt is when the token stops working; zero only for a record built by hand.
	ExpiresAt time.Time
	// Scopes are what the token may do, space-separated ("read write"); package auth
	// defines them.
	Scopes string
}

const tokenCols = `t.id, t.user_id, t.name, t.token_hash, t.prefix, t.created_at, t.last_used_at, t.revoked_at, t.expires_at, t.scopes`

// tokenTimes holds a token row's nullable times while it is scanned.
type tokenTimes struct {
	created                int64
	used, revoked, expires sql.NullInt64
}

func tokenDest(t *APIToken, tt *tokenTimes) []any {
	return []any{&t.ID, &t.UserID, &t.Name, &t.TokenHash, &t.Prefix, &tt.created, &tt.used, &tt.revoked, &tt.expires, &t.Scopes}
}

func (t *APIToken) setTimes(tt tokenTimes) {
	t.CreatedAt, t.LastUsedAt, t.RevokedAt = fromNanos(tt.created), fromNullNanos(tt.used), fromNullNanos(tt.revoked)
	t.ExpiresAt = fromNullNanos(tt.expires)
}

// CreateAPIToken stores t (ID generated when empty) and returns it.
func (tx *Tx) CreateAPIToken(ctx context.Context, t APIToken) (APIToken, error) {
	if t.ID == "" {
		t.ID = NewID()
	}
	var expires sql.NullInt64
	if !t.ExpiresAt.IsZero() {
		expires = sql.NullInt64{Int64: nanos(t.ExpiresAt), Valid: true}
	}
	_, err := tx.tx.ExecContext(ctx, `INSERT INTO api_tokens (id, user_id, name, token_hash, prefix, created_at, expires_at, scopes) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		t.ID, t.UserID, t.Name, t.TokenHash, t.Prefix, nanos(t.CreatedAt), expires, t.Scopes)
	if err != nil {
		return APIToken{}, fmt.Errorf("create API token: %w", mapErr(err))
	}
	return t, nil
}

// APITokenByHash returns the token (revoked or not) with tokenHash and its owner, or
// [errdefs.ErrNotFound].
func (s *Store) APITokenByHash(ctx context.Context, tokenHash []byte) (APIToken, User, error) {
	var t APIToken
	var tt tokenTimes
	u, err := scanUser(s.r.QueryRowContext(ctx, `SELECT `+userCols+`, `+tokenCols+`
		FROM api_tokens t JOIN users u ON u.id = t.user_id WHERE t.token_hash = ?`, tokenHash),
		tokenDest(&t, &tt)...)
	if err != nil {
		return APIToken{}, User{}, fmt.Errorf("API token: %w", mapErr(err))
	}
	t.setTimes(tt)
	return t, u, nil
}

// ListAPITokens returns userID's tokens, newest first, revoked ones included.
func (s *Store) ListAPITokens(ctx context.Context, userID string) ([]APIToken, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+tokenCols+` FROM api_tokens t WHERE t.user_id = ? ORDER BY t.created_at DESC, t.id`, userID)
	if err != nil {
		return nil, fmt.Errorf("list API tokens: %w", mapErr(err))
	}
	defer rows.Close()
	var out []APIToken
	for rows.Next() {
		var t APIToken
		var tt tokenTimes
		if err := rows.Scan(tokenDest(&t, &tt)...); err != nil {
			return nil, fmt.Errorf("list API tokens: %w", mapErr(err))
		}
		t.setTimes(tt)
		out = append(out, t)
	}
	return out, mapErr(rows.Err())
}

// RevokeAPIToken revokes userID's token id at now. A token that does not exist,
// belongs to someone else or is already revoked is [errdefs.ErrNotFound], so the
// answer never tells whether another user's token ID exists.
func (tx *Tx) RevokeAPIToken(ctx context.Context, userID, id string, now time.Time) error {
	res, err := tx.tx.ExecContext(ctx, `UPDATE api_tokens SET revoked_at = ? WHERE id = ? AND user_id = ? AND revoked_at IS NULL`,
		nanos(now), id, userID)
	return affectedOne(res, err, "API token "+id)
}

// RevokeUserAPITokens revokes every standing token of userID at now and returns how many
// (a password change or an account recovery ends them all).
func (tx *Tx) RevokeUserAPITokens(ctx context.Context, userID string, now time.Time) (int, error) {
	res, err := tx.tx.ExecContext(ctx, `UPDATE api_tokens SET revoked_at = ? WHERE user_id = ? AND revoked_at IS NULL`, nanos(now), userID)
	if err != nil {
		return 0, fmt.Errorf("revoke API tokens: %w", mapErr(err))
	}
	n, err := res.RowsAffected()
	return int(n), mapErr(err)
}

// TouchAPIToken records that a token was used, at most once per granularity.
func (s *Store) TouchAPIToken(ctx context.Context, id string, now time.Time, granularity time.Duration) error {
	_, err := s.w.ExecContext(ctx, `UPDATE api_tokens SET last_used_at = ? WHERE id = ? AND (last_used_at IS NULL OR last_used_at <= ?)`,
		nanos(now), id, nanos(now.Add(-granularity)))
	if err != nil {
		return fmt.Errorf("touch API token: %w", mapErr(err))
	}
	return nil
}
