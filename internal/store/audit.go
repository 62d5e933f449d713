package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// AuditEvent is one entry in the audit log. It must carry no secret: callers put
// identifiers (user IDs, token IDs, usernames) in it, never passwords, codes, session
// IDs or tokens.
type AuditEvent struct {
	ID          int64
	At          time.Time
	ActorUserID string // empty for anonymous actions (a failed login)
	Action      string // dotted verb, e.g. "auth.login.failure"
	Target      string
	Detail      map[string]any
}

const appendAuditSQL = `INSERT INTO audit_events (at, actor_user_id, action, target, detail) VALUES (?, ?, ?, ?, ?)`

// Audit appends events to the audit log, in one transaction: all of them or none.
func (s *Store) Audit(ctx context.Context, events ...AuditEvent) error {
	return s.Update(ctx, func(tx *Tx) error {
		for _, e := range events {
			if err := tx.AppendAudit(ctx, e); err != nil {
				return err
			}
		}
		return nil
	})
}

// AppendAudit records e.
func (tx *Tx) AppendAudit(ctx context.Context, e AuditEvent) error {
	row, err := newAuditRow(e)
	if err != nil {
		return err
	}
	return tx.appendAuditRow(ctx, row)
}

// auditRow is an event as its row holds it: the detail already in JSON, so that a
// queued event no longer shares its map with the caller.
type auditRow struct {
	at                            int64
	actor, action, target, detail string
}

func newAuditRow(e AuditEvent) (auditRow, error) {
	if e.Action == "" {
		return auditRow{}, fmt.Errorf("audit event without action: %w", errdefs.ErrInvalidArgument)
	}
	detail := []byte("{}")
	if len(e.Detail) > 0 {
		var err error
		if detail, err = json.Marshal(e.Detail); err != nil {
			return auditRow{}, fmt.Errorf("audit detail: %w: %w", errdefs.ErrInvalidArgument, err)
		}
	}
	return auditRow{at: nanos(e.At), actor: e.ActorUserID, action: e.Action, target: e.Target, detail: string(detail)}, nil
}

func (tx *Tx) appendAuditRow(ctx context.Context, r auditRow) error {
	if _, err := tx.exec(ctx, appendAuditSQL, r.at, r.actor, r.action, r.target, r.detail); err != nil {
		return fmt.Errorf("append audit event: %w", mapErr(err))
	}
	return nil
}

// AuditFilter selects audit events; zero fields match everything.
type AuditFilter struct {
	ActorUserID string
	Action      string
	Limit       int // default 100
	// Before, when positive, keeps only events with a smaller ID: the next page of a
	// newest-first listing whose last event was Before.
	Before int64
}

// ListAudit returns the newest events matching f, newest first.
func (s *Store) ListAudit(ctx context.Context, f AuditFilter) ([]AuditEvent, error) {
	if err := s.flushAudit(ctx); err != nil {
		return nil, err
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	rows, err := s.r.QueryContext(ctx, `SELECT id, at, actor_user_id, action, target, detail FROM audit_events
		WHERE (? = '' OR actor_user_id = ?) AND (? = '' OR action = ?) AND (? <= 0 OR id < ?) ORDER BY id DESC LIMIT ?`,
		f.ActorUserID, f.ActorUserID, f.Action, f.Action, f.Before, f.Before, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list audit events: %w", mapErr(err))
	}
	return scanAudit(rows)
}

func scanAudit(rows *sql.Rows) ([]AuditEvent, error) {
	defer rows.Close()
	var out []AuditEvent
	for rows.Next() {
		var e AuditEvent
		var at int64
		var detail string
		if err := rows.Scan(&e.ID, &at, &e.ActorUserID, &e.Action, &e.Target, &detail); err != nil {
			return nil, fmt.Errorf("list audit events: %w", mapErr(err))
		}
		e.At = fromNanos(at)
		if err := json.Unmarshal([]byte(detail), &e.Detail); err != nil {
			return nil, fmt.Errorf("audit event %d detail: %w", e.ID, err)
		}
		out = append(out, e)
	}
	return out, mapErr(rows.Err())
}

func isNotFound(err error) bool { return errors.Is(err, errdefs.ErrNotFound) }

// TargetFilter selects the events about one target, oldest first, for a reader that
// follows them with a cursor.
type TargetFilter struct {
	Target       string
	ActionPrefix string // e.g. "history."; empty matches every action
	After        int64  // only events with a greater ID
	Limit        int    // default 100
}

// ListTarget returns the events about f.Target after f.After, oldest first.
func (s *Store) ListTarget(ctx context.Context, f TargetFilter) ([]AuditEvent, error) {
	if f.Target == "" {
		return nil, fmt.Errorf("list events: no target: %w", errdefs.ErrInvalidArgument)
	}
	if err := s.flushAudit(ctx); err != nil {
		return nil, err
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	rows, err := s.r.QueryContext(ctx, `SELECT id, at, actor_user_id, action, target, detail FROM audit_events
		WHERE target = ? AND id > ? AND substr(action, 1, ?) = ? ORDER BY id LIMIT ?`,
		f.Target, f.After, len(f.ActionPrefix), f.ActionPrefix, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list events of %s: %w", f.Target, mapErr(err))
	}
	return scanAudit(rows)
}
