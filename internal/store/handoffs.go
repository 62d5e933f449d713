package store

import (
	"context"
	"fmt"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Handoff is a sign-in on an apps host as the store keeps it (package origins): a
// handoff code's or an app cookie's user, host, expiry, and the session it stands for
// sealed under a key only the code or cookie itself gives.
type Handoff struct {
	UserID  string
	Host    string
	Sealed  []byte
	Expires time.Time
}

// handoffTables are the two kinds of sign-in: codes and the cookies they become.
var handoffTables = map[bool]string{false: "handoff_codes", true: "app_cookies"}

// PutHandoff keeps h under key (a SHA-256 in hex): a code when cookie is false, else an
// app cookie. Expired ones go first. A user holding max codes already is refused
// ([errdefs.ErrLimitExceeded]); one holding max cookies loses the oldest.
func (s *Store) PutHandoff(ctx context.Context, cookie bool, key string, h Handoff, max int, now time.Time) error {
	table := handoffTables[cookie]
	return s.Update(ctx, func(tx *Tx) error {
		if _, err := tx.tx.ExecContext(ctx, `DELETE FROM `+table+` WHERE expires_at <= ?`, nanos(now)); err != nil {
			return fmt.Errorf("%s: %w", table, mapErr(err))
		}
		var n int
		if err := tx.tx.QueryRowContext(ctx, `SELECT count(*) FROM `+table+` WHERE user_id = ?`, h.UserID).Scan(&n); err != nil {
			return fmt.Errorf("%s: %w", table, mapErr(err))
		}
		if n >= max && !cookie {
			return fmt.Errorf("%d handoffs within a minute: wait a minute: %w", n, errdefs.ErrLimitExceeded)
		}
		if n >= max {
			if _, err := tx.tx.ExecContext(ctx, `DELETE FROM `+table+` WHERE key = (SELECT key FROM `+table+`
				WHERE user_id = ? ORDER BY expires_at, key LIMIT 1)`, h.UserID); err != nil {
				return fmt.Errorf("%s: %w", table, mapErr(err))
			}
		}
		_, err := tx.tx.ExecContext(ctx, `INSERT INTO `+table+` (key, user_id, host, sealed, expires_at) VALUES (?, ?, ?, ?, ?)`,
			key, h.UserID, h.Host, h.Sealed, nanos(h.Expires))
		if err != nil {
			return fmt.Errorf("%s: %w", table, mapErr(err))
		}
		return nil
	})
}

// TakeHandoffCode removes the code kept under key and returns it, or
// [errdefs.ErrNotFound]: a code is used once, by whichever replica sees it first.
func (s *Store) TakeHandoffCode(ctx context.Context, key string) (Handoff, error) {
	var h Handoff
	err := s.Update(ctx, func(tx *Tx) error {
		var err error
		if h, err = handoffByKey(ctx, tx.tx, "handoff_codes", key); err != nil {
			return err
		}
		_, err = tx.tx.ExecContext(ctx, `DELETE FROM handoff_codes WHERE key = ?`, key)
		return mapErr(err)
	})
	return h, err
}

// AppCookie returns the app cookie kept under key, or [errdefs.ErrNotFound].
func (s *Store) AppCookie(ctx context.Context, key string) (Handoff, error) {
	return handoffByKey(ctx, s.r, "app_cookies", key)
}

// DeleteAppCookie ends the app cookie kept under key, if there is one.
func (s *Store) DeleteAppCookie(ctx context.Context, key string) error {
	return s.Update(ctx, func(tx *Tx) error {
		_, err := tx.tx.ExecContext(ctx, `DELETE FROM app_cookies WHERE key = ?`, key)
		return mapErr(err)
	})
}

func handoffByKey(ctx context.Context, q queryRower, table, key string) (Handoff, error) {
	var (
		h       Handoff
		expires int64
	)
	err := q.QueryRowContext(ctx, `SELECT user_id, host, sealed, expires_at FROM `+table+` WHERE key = ?`, key).
		Scan(&h.UserID, &h.Host, &h.Sealed, &expires)
	if err != nil {
		return Handoff{}, fmt.Errorf("sign-in: %w", mapErr(err))
	}
	h.Expires = fromNanos(expires)
	return h, nil
}
