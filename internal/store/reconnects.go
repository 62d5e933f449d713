package store

import (
	"context"
	"fmt"
	"time"
)

// ReconnectAttempt records a WebSocket connection attempt by userID at now, unless limit
// attempts were recorded within window already: then ok is false, retry is how long
// until one would pass, and report is true the first time in a window. A refused attempt
// is not recorded. Every process sharing the database counts into the same window.
func (s *Store) ReconnectAttempt(ctx context.Context, userID string, now time.Time, window time.Duration, limit int) (ok bool, retry time.Duration, report bool, err error) {
	err = s.Update(ctx, func(tx *Tx) error {
		since := nanos(now.Add(-window))
		if _, err := tx.tx.ExecContext(ctx, `DELETE FROM reconnect_attempts WHERE user_id = ? AND at <= ?`, userID, since); err != nil {
			return fmt.Errorf("reconnect attempts: %w", mapErr(err))
		}
		var (
			n      int
			oldest int64
		)
		if err := tx.tx.QueryRowContext(ctx, `SELECT count(*), coalesce(min(at), 0) FROM reconnect_attempts WHERE user_id = ?`, userID).
			Scan(&n, &oldest); err != nil {
			return fmt.Errorf("reconnect attempts: %w", mapErr(err))
		}
		if n < limit {
			ok = true
			_, err := tx.tx.ExecContext(ctx, `INSERT INTO reconnect_attempts (user_id, at) VALUES (?, ?)`, userID, nanos(now))
			return mapErr(err)
		}
		retry = fromNanos(oldest).Add(window).Sub(now)
		res, err := tx.tx.ExecContext(ctx, `INSERT INTO reconnect_storms (user_id, reported_at) VALUES (?, ?)
			ON CONFLICT (user_id) DO UPDATE SET reported_at = excluded.reported_at WHERE reconnect_storms.reported_at <= ?`,
			userID, nanos(now), since)
		if err != nil {
			return fmt.Errorf("reconnect storms: %w", mapErr(err))
		}
		n64, err := res.RowsAffected()
		report = err == nil && n64 > 0
		return nil
	})
	return ok, retry, report, err
}
