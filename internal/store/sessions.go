package store

import (
	"context"
	"fmt"
	"time"
)

// Session is a server-side login session. Only the SHA-256 of its ID is stored.
type Session struct {
	IDHash     []byte
	UserID     string
	CreatedAt  time.Time
	ExpiresAt  time.Time // absolute expiry
	LastSeenAt time.Time // for the idle expiry, which the caller checks
	UserAgent  string
	IP         string
}

// CreateSession stores s.
func (tx *Tx) CreateSession(ctx context.Context, s Session) error {
	_, err := tx.tx.ExecContext(ctx, `INSERT INTO sessions (id_hash, user_id, created_at, expires_at, last_seen_at, user_agent, ip)
		VALUES (?, ?, ?, ?, ?, ?, ?)`,
		s.IDHash, s.UserID, nanos(s.CreatedAt), nanos(s.ExpiresAt), nanos(s.LastSeenAt), s.UserAgent, s.IP)
	if err != nil {
		return fmt.Errorf("create session: %w", mapErr(err))
	}
	return nil
}

const sessionByHashSQL = `SELECT ` + userCols + `, s.id_hash, s.created_at, s.expires_at, s.last_seen_at, s.user_agent, s.ip
	FROM sessions s JOIN users u ON u.id = s.user_id WHERE s.id_hash = ?`

// SessionByHash returns the session whose ID hashes to idHash and its user, or
// [errdefs.ErrNotFound]. Expiry is the caller's to check.
func (s *Store) SessionByHash(ctx context.Context, idHash []byte) (Session, User, error) {
	var ss Session
	var created, expires, seen int64
	u, err := scanUser(s.sessionByHash.QueryRowContext(ctx, idHash),
		&ss.IDHash, &created, &expires, &seen, &ss.UserAgent, &ss.IP)
	if err != nil {
		return Session{}, User{}, fmt.Errorf("session: %w", mapErr(err))
	}
	ss.UserID = u.ID
	ss.CreatedAt, ss.ExpiresAt, ss.LastSeenAt = fromNanos(created), fromNanos(expires), fromNanos(seen)
	return ss, u, nil
}

// TouchSession records activity on a session, at most once per granularity: the
// idle timeout does not need nanosecond precision and a write per request would
// serialize every request behind the one writer.
func (s *Store) TouchSession(ctx context.Context, idHash []byte, now time.Time, granularity time.Duration) error {
	_, err := s.w.ExecContext(ctx, `UPDATE sessions SET last_seen_at = ? WHERE id_hash = ? AND last_seen_at <= ?`,
		nanos(now), idHash, nanos(now.Add(-granularity)))
	if err != nil {
		return fmt.Errorf("touch session: %w", mapErr(err))
	}
	return nil
}

// DeleteSession removes one session; [errdefs.ErrNotFound] when it does not exist.
func (tx *Tx) DeleteSession(ctx context.Context, idHash []byte) error {
	res, err := tx.tx.ExecContext(ctx, `DELETE FROM sessions WHERE id_hash = ?`, idHash)
	return affectedOne(res, err, "session")
}

// DeleteUserSessions removes every session of userID and returns how many there were.
func (tx *Tx) DeleteUserSessions(ctx context.Context, userID string) (int, error) {
	res, err := tx.tx.ExecContext(ctx, `DELETE FROM sessions WHERE user_id = ?`, userID)
	if err != nil {
		return 0, fmt.Errorf("delete sessions: %w", mapErr(err))
	}
	n, err := res.RowsAffected()
	return int(n), mapErr(err)
}

// DeleteOtherUserSessions removes every session of userID except keepHash's and
// returns how many it removed (after a password change: sign out everywhere else).
func (tx *Tx) DeleteOtherUserSessions(ctx context.Context, userID string, keepHash []byte) (int, error) {
	res, err := tx.tx.ExecContext(ctx, `DELETE FROM sessions WHERE user_id = ? AND id_hash != ?`, userID, keepHash)
	if err != nil {
		return 0, fmt.Errorf("delete sessions: %w", mapErr(err))
	}
	n, err := res.RowsAffected()
	return int(n), mapErr(err)
}

// DeleteExpiredSessions removes sessions past their absolute expiry at now or idle
// since before idleCutoff, and returns how many it removed.
func (s *Store) DeleteExpiredSessions(ctx context.Context, now, idleCutoff time.Time) (int, error) {
	res, err := s.w.ExecContext(ctx, `DELETE FROM sessions WHERE expires_at <= ? OR last_seen_at < ?`, nanos(now), nanos(idleCutoff))
	if err != nil {
		return 0, fmt.Errorf("delete expired sessions: %w", mapErr(err))
	}
	n, err := res.RowsAffected()
	return int(n), mapErr(err)
}

// CountUserSessions returns how many sessions userID has.
func (s *Store) CountUserSessions(ctx context.Context, userID string) (int, error) {
	var n int
	err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM sessions WHERE user_id = ?`, userID).Scan(&n)
	return n, mapErr(err)
}
