package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// SandboxPolicy is the policy attached to one sandbox: the YAML text that loaded when it
// was attached (see package policy), and who attached it when.
type SandboxPolicy struct {
	SandboxID string
	Text      string
	UpdatedBy string // a user ID
	UpdatedAt time.Time
}

// sandboxPolicySQL runs before every exec and file operation: it is prepared once.
const sandboxPolicySQL = `SELECT policy, updated_by, updated_at FROM sandbox_policies WHERE sandbox_id = ?`

// SandboxPolicy returns the policy attached to sandboxID, or [errdefs.ErrNotFound] when it
// has none.
func (s *Store) SandboxPolicy(ctx context.Context, sandboxID string) (SandboxPolicy, error) {
	p := SandboxPolicy{SandboxID: sandboxID}
	var updated int64
	err := s.queryRow(ctx, sandboxPolicySQL, sandboxID).Scan(&p.Text, &p.UpdatedBy, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return SandboxPolicy{}, fmt.Errorf("sandbox %s has no policy of its own: %w", sandboxID, errdefs.ErrNotFound)
	}
	if err != nil {
		return SandboxPolicy{}, fmt.Errorf("policy of sandbox %s: %w", sandboxID, mapErr(err))
	}
	p.UpdatedAt = fromNanos(updated)
	return p, nil
}

// PutSandboxPolicy attaches p to its sandbox, replacing what was attached. A sandbox that
// does not exist is [errdefs.ErrNotFound].
func (tx *Tx) PutSandboxPolicy(ctx context.Context, p SandboxPolicy) error {
	_, err := tx.tx.ExecContext(ctx, `INSERT INTO sandbox_policies (sandbox_id, policy, updated_by, updated_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (sandbox_id) DO UPDATE SET policy = excluded.policy, updated_by = excluded.updated_by, updated_at = excluded.updated_at`,
		p.SandboxID, p.Text, p.UpdatedBy, nanos(p.UpdatedAt))
	if err != nil {
		return fmt.Errorf("policy of sandbox %s: %w", p.SandboxID, mapErr(err))
	}
	return nil
}

// DeleteSandboxPolicy detaches sandboxID's policy; one that has none is
// [errdefs.ErrNotFound].
func (tx *Tx) DeleteSandboxPolicy(ctx context.Context, sandboxID string) error {
	res, err := tx.tx.ExecContext(ctx, `DELETE FROM sandbox_policies WHERE sandbox_id = ?`, sandboxID)
	return affectedOne(res, err, "sandbox "+sandboxID+" has no policy of its own")
}
