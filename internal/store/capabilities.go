package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Capability is the record of a capability token the control plane minted for a sandbox:
// what it grants, never the token.
type Capability struct {
	ID        string // the token's ID (32 hex digits)
	SandboxID string
	MintedBy  string // a user ID
	Resource  string
	Actions   []string
	ExpiresAt time.Time
	CreatedAt time.Time
	RevokedAt time.Time // zero while not revoked
}

// CreateCapability records c, which must carry its token's ID.
func (tx *Tx) CreateCapability(ctx context.Context, c Capability) error {
	_, err := tx.tx.ExecContext(ctx, `INSERT INTO capabilities (id, sandbox_id, minted_by, resource, actions, expires_at, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, c.ID, c.SandboxID, c.MintedBy, c.Resource, strings.Join(c.Actions, " "), nanos(c.ExpiresAt), nanos(c.CreatedAt))
	if err != nil {
		return fmt.Errorf("record capability %s: %w", c.ID, mapErr(err))
	}
	return nil
}

// RevokeCapability marks sandboxID's token id revoked at now. A token of another sandbox,
// or none, is [errdefs.ErrNotFound]; one already revoked keeps its first time and is not
// an error.
func (tx *Tx) RevokeCapability(ctx context.Context, sandboxID, id string, now time.Time) (Capability, error) {
	_, err := tx.tx.ExecContext(ctx, `UPDATE capabilities SET revoked_at = ? WHERE id = ? AND sandbox_id = ? AND revoked_at = 0`,
		nanos(now), id, sandboxID)
	if err != nil {
		return Capability{}, fmt.Errorf("revoke capability %s: %w", id, mapErr(err))
	}
	rows, err := tx.tx.QueryContext(ctx, `SELECT `+capabilityCols+` FROM capabilities WHERE id = ? AND sandbox_id = ?`, id, sandboxID)
	if err != nil {
		return Capability{}, fmt.Errorf("revoke capability %s: %w", id, mapErr(err))
	}
	defer rows.Close()
	if !rows.Next() {
		return Capability{}, fmt.Errorf("sandbox %s has no capability %s: %w", sandboxID, id, errors.Join(mapErr(rows.Err()), errdefs.ErrNotFound))
	}
	return scanCapability(rows)
}

// capabilityRevokedSQL runs for every request made under a capability: prepared once.
const capabilityRevokedSQL = `SELECT revoked_at FROM capabilities WHERE id = ?`

// CapabilityRevoked says whether token id may no longer be used: revoked, or unknown to
// this database (so a token minted under a key some other database shares is refused).
func (s *Store) CapabilityRevoked(ctx context.Context, id string) (bool, error) {
	var revoked int64
	err := s.queryRow(ctx, capabilityRevokedSQL, id).Scan(&revoked)
	if errors.Is(err, sql.ErrNoRows) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("capability %s: %w", id, mapErr(err))
	}
	return revoked != 0, nil
}

// ListCapabilities returns sandboxID's tokens, newest first, revoked and expired ones
// included.
func (s *Store) ListCapabilities(ctx context.Context, sandboxID string) ([]Capability, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+capabilityCols+` FROM capabilities WHERE sandbox_id = ? ORDER BY created_at DESC, id`, sandboxID)
	if err != nil {
		return nil, fmt.Errorf("list capabilities: %w", mapErr(err))
	}
	defer rows.Close()
	out := []Capability{}
	for rows.Next() {
		c, err := scanCapability(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, mapErr(rows.Err())
}

const capabilityCols = `id, sandbox_id, minted_by, resource, actions, expires_at, created_at, revoked_at`

func scanCapability(rows *sql.Rows) (Capability, error) {
	var c Capability
	var actions string
	var expires, created, revoked int64
	if err := rows.Scan(&c.ID, &c.SandboxID, &c.MintedBy, &c.Resource, &actions, &expires, &created, &revoked); err != nil {
		return Capability{}, fmt.Errorf("capability: %w", mapErr(err))
	}
	c.Actions = strings.Fields(actions)
	c.ExpiresAt, c.CreatedAt = fromNanos(expires), fromNanos(created)
	if revoked != 0 {
		c.RevokedAt = fromNanos(revoked)
	}
	return c, nil
}
