package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// RecordLoginAttempt records an attempt under key ("user:<name>" or "ip:<addr>")
// and returns its ID. Callers record an attempt before checking the password and
// delete it ([Tx.DeleteLoginAttempt]) if it succeeds, so that concurrent attempts
// cannot all pass the limit check before any is counted.
func (tx *Tx) RecordLoginAttempt(ctx context.Context, key string, at time.Time) (int64, error) {
	var id int64
	err := tx.tx.QueryRowContext(ctx, `INSERT INTO login_attempts (key, at) VALUES (?, ?) RETURNING rowid`, key, nanos(at)).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("record login attempt: %w", mapErr(err))
	}
	return id, nil
}

// DeleteLoginAttempt forgets one recorded attempt.
func (tx *Tx) DeleteLoginAttempt(ctx context.Context, id int64) error {
	if _, err := tx.tx.ExecContext(ctx, `DELETE FROM login_attempts WHERE rowid = ?`, id); err != nil {
		return fmt.Errorf("delete login attempt: %w", mapErr(err))
	}
	return nil
}

// ClearLoginAttempts forgets every attempt under key.
func (tx *Tx) ClearLoginAttempts(ctx context.Context, key string) error {
	if _, err := tx.tx.ExecContext(ctx, `DELETE FROM login_attempts WHERE key = ?`, key); err != nil {
		return fmt.Errorf("clear login attempts: %w", mapErr(err))
	}
	return nil
}

// LoginAttempts returns how many attempts key has since since, and the oldest of
// them (zero when none), from which a caller computes when the window frees up.
func (s *Store) LoginAttempts(ctx context.Context, key string, since time.Time) (n int, oldest time.Time, err error) {
	var oldestAt *int64
	err = s.r.QueryRowContext(ctx, `SELECT count(*), min(at) FROM login_attempts WHERE key = ? AND at > ?`, key, nanos(since)).Scan(&n, &oldestAt)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("count login attempts: %w", mapErr(err))
	}
	if oldestAt != nil {
		oldest = fromNanos(*oldestAt)
	}
	return n, oldest, nil
}

// LoginAttemptStats returns how many attempts key has since since, and the latest of
// them (zero when none), inside the transaction.
func (tx *Tx) LoginAttemptStats(ctx context.Context, key string, since time.Time) (n int, latest time.Time, err error) {
	var latestAt *int64
	err = tx.tx.QueryRowContext(ctx, `SELECT count(*), max(at) FROM login_attempts WHERE key = ? AND at > ?`, key, nanos(since)).Scan(&n, &latestAt)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("count login attempts: %w", mapErr(err))
	}
	if latestAt != nil {
		latest = fromNanos(*latestAt)
	}
	return n, latest, nil
}

// NthLatestLoginAttempt returns the time of key's nth most recent attempt since
// since (n counts from 1), or the zero time when there are fewer. A limiter allowing
// n attempts per window opens again one window after that attempt.
func (s *Store) NthLatestLoginAttempt(ctx context.Context, key string, since time.Time, n int) (time.Time, error) {
	return nthLatest(ctx, s.r, key, since, n)
}

// NthLatestLoginAttempt is [Store.NthLatestLoginAttempt] inside the transaction,
// so that checking a limit and recording an attempt are one atomic step.
func (tx *Tx) NthLatestLoginAttempt(ctx context.Context, key string, since time.Time, n int) (time.Time, error) {
	return nthLatest(ctx, tx.tx, key, since, n)
}

type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func nthLatest(ctx context.Context, q queryRower, key string, since time.Time, n int) (time.Time, error) {
	if n < 1 {
		return time.Time{}, nil
	}
	var at int64
	err := q.QueryRowContext(ctx, `SELECT at FROM login_attempts WHERE key = ? AND at > ? ORDER BY at DESC LIMIT 1 OFFSET ?`,
		key, nanos(since), n-1).Scan(&at)
	if err != nil {
		err = mapErr(err)
		if isNotFound(err) {
			return time.Time{}, nil
		}
		return time.Time{}, fmt.Errorf("login attempts: %w", err)
	}
	return fromNanos(at), nil
}

// PruneLoginAttempts deletes attempts at or before before; they no longer count.
func (s *Store) PruneLoginAttempts(ctx context.Context, before time.Time) (int, error) {
	res, err := s.w.ExecContext(ctx, `DELETE FROM login_attempts WHERE at <= ?`, nanos(before))
	if err != nil {
		return 0, fmt.Errorf("prune login attempts: %w", mapErr(err))
	}
	n, err := res.RowsAffected()
	return int(n), mapErr(err)
}
