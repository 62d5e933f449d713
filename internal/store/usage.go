package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// addUsageSQL adds tokens to a user's count for one provider and day, saturating at the
// largest int64 rather than wrapping.
const addUsageSQL = `INSERT INTO gateway_usage (user_id, provider, day, tokens) VALUES (?, ?, ?, ?)
	ON CONFLICT (user_id, provider, day) DO UPDATE SET tokens =
		CASE WHEN gateway_usage.tokens > 9223372036854775807 - excluded.tokens THEN 9223372036854775807
			ELSE gateway_usage.tokens + excluded.tokens END
	RETURNING tokens`

// AddUsage adds tokens (> 0) to what userID has spent on provider on day (a UTC midnight),
// and returns the day's new total.
func (tx *Tx) AddUsage(ctx context.Context, userID, provider string, day time.Time, tokens int64) (int64, error) {
	var total int64
	if err := tx.queryRow(ctx, addUsageSQL, userID, provider, day.Unix(), tokens).Scan(&total); err != nil {
		return 0, fmt.Errorf("add %s's usage of %s: %w", userID, provider, mapErr(err))
	}
	return total, nil
}

// Usage returns the tokens userID has spent on provider on day (a UTC midnight); 0 when
// there is no record.
func (s *Store) Usage(ctx context.Context, userID, provider string, day time.Time) (int64, error) {
	var n int64
	err := s.queryRow(ctx, `SELECT tokens FROM gateway_usage WHERE user_id = ? AND provider = ? AND day = ?`,
		userID, provider, day.Unix()).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read %s's usage of %s: %w", userID, provider, mapErr(err))
	}
	return n, nil
}

// PruneUsage deletes the usage of days before day.
func (tx *Tx) PruneUsage(ctx context.Context, day time.Time) error {
	if _, err := tx.tx.ExecContext(ctx, `DELETE FROM gateway_usage WHERE day < ?`, day.Unix()); err != nil {
		return fmt.Errorf("prune gateway usage: %w", mapErr(err))
	}
	return nil
}

// AddUsage is Tx.AddUsage in a transaction of its own.
func (s *Store) AddUsage(ctx context.Context, userID, provider string, day time.Time, tokens int64) (total int64, err error) {
	err = s.Update(ctx, func(tx *Tx) error {
		total, err = tx.AddUsage(ctx, userID, provider, day, tokens)
		return err
	})
	return total, err
}

// PruneUsage is Tx.PruneUsage in a transaction of its own.
func (s *Store) PruneUsage(ctx context.Context, day time.Time) error {
	return s.Update(ctx, func(tx *Tx) error { return tx.PruneUsage(ctx, day) })
}

// RateBucket is a user's request bucket on a provider, as the gateway keeps it: Micros
// are millionths of a request, Last when it was last refilled. A bucket not found is zero.
type RateBucket struct {
	Micros int64
	Last   time.Time
}

// RateBucket reads userID's bucket on provider, for SetRateBucket in the same transaction.
func (tx *Tx) RateBucket(ctx context.Context, userID, provider string) (RateBucket, error) {
	var b RateBucket
	var last int64
	err := tx.queryRow(ctx, `SELECT tokens, last_at FROM gateway_rates WHERE user_id = ? AND provider = ?`, userID, provider).Scan(&b.Micros, &last)
	if errors.Is(err, sql.ErrNoRows) {
		return RateBucket{}, nil
	}
	if err != nil {
		return RateBucket{}, fmt.Errorf("read %s's request rate on %s: %w", userID, provider, mapErr(err))
	}
	b.Last = fromNanos(last)
	return b, nil
}

// SpendRate reads userID's bucket on provider, has spend change it, and writes it back, in
// one write transaction (which replicas sharing the store take one at a time).
func (s *Store) SpendRate(ctx context.Context, userID, provider string, spend func(RateBucket) RateBucket) error {
	return s.Update(ctx, func(tx *Tx) error {
		b, err := tx.RateBucket(ctx, userID, provider)
		if err != nil {
			return err
		}
		return tx.SetRateBucket(ctx, userID, provider, spend(b))
	})
}

// SetRateBucket records userID's bucket on provider.
func (tx *Tx) SetRateBucket(ctx context.Context, userID, provider string, b RateBucket) error {
	_, err := tx.tx.ExecContext(ctx, `INSERT INTO gateway_rates (user_id, provider, tokens, last_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (user_id, provider) DO UPDATE SET tokens = excluded.tokens, last_at = excluded.last_at`,
		userID, provider, b.Micros, nanos(b.Last))
	if err != nil {
		return fmt.Errorf("record %s's request rate on %s: %w", userID, provider, mapErr(err))
	}
	return nil
}
