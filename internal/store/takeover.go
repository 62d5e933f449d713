package store

import (
	"context"
	"fmt"
	"time"
)

// TakeOverSandbox records that replica self runs sandbox id in place of replica from, if
// from holds it still and is dead (its heartbeat is not after aliveSince). It reports
// whether it did: of replicas racing for one sandbox, one wins, and a dead replica that
// beat again before the write keeps its sandbox.
func (tx *Tx) TakeOverSandbox(ctx context.Context, id, from, self string, aliveSince time.Time) (bool, error) {
	res, err := tx.tx.ExecContext(ctx, `UPDATE sandboxes SET replica = ? WHERE id = ? AND replica = ?
		AND EXISTS (SELECT 1 FROM replicas WHERE id = ? AND heartbeat_at <= ?)`,
		self, id, from, from, nanos(aliveSince))
	if err != nil {
		return false, fmt.Errorf("take over sandbox %s from replica %s: %w", id, from, mapErr(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("take over sandbox %s from replica %s: %w", id, from, mapErr(err))
	}
	return n == 1, nil
}

// Orphan is a sandbox whose replica is dead.
type Orphan struct {
	SandboxID string
	Replica   Replica
}

// Orphans lists the sandboxes held by replicas other than self whose heartbeat is not
// after aliveSince.
func (s *Store) Orphans(ctx context.Context, self string, aliveSince time.Time) ([]Orphan, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT s.id, r.id, r.advertise, r.started_at, r.heartbeat_at
		FROM sandboxes s JOIN replicas r ON r.id = s.replica
		WHERE s.replica <> ? AND r.heartbeat_at <= ? ORDER BY s.id`, self, nanos(aliveSince))
	if err != nil {
		return nil, fmt.Errorf("sandboxes of dead replicas: %w", mapErr(err))
	}
	defer rows.Close()
	var out []Orphan
	for rows.Next() {
		var (
			o           Orphan
			started, hb int64
		)
		if err := rows.Scan(&o.SandboxID, &o.Replica.ID, &o.Replica.Advertise, &started, &hb); err != nil {
			return nil, fmt.Errorf("sandboxes of dead replicas: %w", mapErr(err))
		}
		o.Replica.StartedAt, o.Replica.HeartbeatAt = fromNanos(started), fromNanos(hb)
		out = append(out, o)
	}
	return out, rows.Err()
}

// SandboxesOf lists the IDs of the sandboxes that record replica id as theirs.
func (s *Store) SandboxesOf(ctx context.Context, id string) (map[string]bool, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id FROM sandboxes WHERE replica = ?`, id)
	if err != nil {
		return nil, fmt.Errorf("sandboxes of replica %s: %w", id, mapErr(err))
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var sid string
		if err := rows.Scan(&sid); err != nil {
			return nil, fmt.Errorf("sandboxes of replica %s: %w", id, mapErr(err))
		}
		out[sid] = true
	}
	return out, rows.Err()
}
