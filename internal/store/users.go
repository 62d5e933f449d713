package store

import (
	"context"
	"fmt"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Roles a user can have.
const (
	RoleUser  = "user"
	RoleAdmin = "admin"
)

// User is an account.
type User struct {
	ID       string
	Username string
	// PasswordHash is an Argon2id PHC string, never a password.
	PasswordHash string
	Role         string
	CreatedAt    time.Time
}

const userCols = `u.id, u.username, u.password_hash, u.role, u.created_at`

type scanner interface{ Scan(dest ...any) error }

func scanUser(sc scanner, extra ...any) (User, error) {
	var u User
	var created int64
	err := sc.Scan(append([]any{&u.ID, &u.Username, &u.PasswordHash, &u.Role, &created}, extra...)...)
	u.CreatedAt = fromNanos(created)
	return u, err
}

// UserByID returns the user with id, or [errdefs.ErrNotFound].
func (s *Store) UserByID(ctx context.Context, id string) (User, error) {
	u, err := scanUser(s.r.QueryRowContext(ctx, `SELECT `+userCols+` FROM users u WHERE u.id = ?`, id))
	if err != nil {
		return User{}, fmt.Errorf("user %s: %w", id, mapErr(err))
	}
	return u, nil
}

// UserByUsername returns the user whose username equals name ignoring ASCII case,
// or [errdefs.ErrNotFound].
func (s *Store) UserByUsername(ctx context.Context, name string) (User, error) {
	u, err := scanUser(s.r.QueryRowContext(ctx, `SELECT `+userCols+` FROM users u WHERE u.username = ?`, name))
	if err != nil {
		return User{}, fmt.Errorf("user %q: %w", name, mapErr(err))
	}
	return u, nil
}

// CountUsers returns the number of accounts (the control plane creates its first
// admin when there are none).
func (s *Store) CountUsers(ctx context.Context) (int, error) {
	var n int
	err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM users`).Scan(&n)
	return n, mapErr(err)
}

// CreateUser inserts u (ID generated when empty) with its recovery codes' hashes and
// returns it. A username taken in any ASCII case is [errdefs.ErrAlreadyExists].
func (tx *Tx) CreateUser(ctx context.Context, u User, codeHashes [][]byte) (User, error) {
	if u.ID == "" {
		u.ID = NewID()
	}
	u.CreatedAt = u.CreatedAt.UTC()
	_, err := tx.tx.ExecContext(ctx, `INSERT INTO users (id, username, password_hash, role, created_at) VALUES (?, ?, ?, ?, ?)`,
		u.ID, u.Username, u.PasswordHash, u.Role, nanos(u.CreatedAt))
	if err != nil {
		return User{}, fmt.Errorf("create user %q: %w", u.Username, mapErr(err))
	}
	for _, h := range codeHashes {
		if _, err := tx.tx.ExecContext(ctx, `INSERT INTO recovery_codes (user_id, code_hash) VALUES (?, ?)`, u.ID, h); err != nil {
			return User{}, fmt.Errorf("store recovery code: %w", mapErr(err))
		}
	}
	return u, nil
}

// SetPasswordHash replaces a user's password hash (after a rehash or a change).
func (tx *Tx) SetPasswordHash(ctx context.Context, userID, hash string) error {
	res, err := tx.tx.ExecContext(ctx, `UPDATE users SET password_hash = ? WHERE id = ?`, hash, userID)
	return affectedOne(res, err, "user "+userID)
}

// RedeemRecoveryCode marks the unused recovery code with codeHash of userID as used
// at now; [errdefs.ErrNotFound] when there is no such unused code. Because it is a
// single conditional UPDATE, two concurrent redemptions of one code cannot both win.
func (tx *Tx) RedeemRecoveryCode(ctx context.Context, userID string, codeHash []byte, now time.Time) error {
	res, err := tx.tx.ExecContext(ctx, `UPDATE recovery_codes SET used_at = ? WHERE user_id = ? AND code_hash = ? AND used_at IS NULL`,
		nanos(now), userID, codeHash)
	return affectedOne(res, err, "recovery code")
}

// ReplaceRecoveryCodes deletes every recovery code of userID and stores new ones.
func (tx *Tx) ReplaceRecoveryCodes(ctx context.Context, userID string, codeHashes [][]byte) error {
	if _, err := tx.tx.ExecContext(ctx, `DELETE FROM recovery_codes WHERE user_id = ?`, userID); err != nil {
		return fmt.Errorf("delete recovery codes: %w", mapErr(err))
	}
	for _, h := range codeHashes {
		if _, err := tx.tx.ExecContext(ctx, `INSERT INTO recovery_codes (user_id, code_hash) VALUES (?, ?)`, userID, h); err != nil {
			return fmt.Errorf("store recovery code: %w", mapErr(err))
		}
	}
	return nil
}

// UnusedRecoveryCodes returns how many recovery codes userID has left.
func (s *Store) UnusedRecoveryCodes(ctx context.Context, userID string) (int, error) {
	var n int
	err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM recovery_codes WHERE user_id = ? AND used_at IS NULL`, userID).Scan(&n)
	return n, mapErr(err)
}

// affectedOne turns "no row changed" into ErrNotFound.
func affectedOne(res interface{ RowsAffected() (int64, error) }, err error, what string) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, mapErr(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s: %w", what, mapErr(err))
	}
	if n == 0 {
		return fmt.Errorf("%s: %w", what, errdefs.ErrNotFound)
	}
	return nil
}
