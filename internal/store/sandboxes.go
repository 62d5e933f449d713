package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Sandbox is the control plane's record of a sandbox.
type Sandbox struct {
	ID          string
	UserID      string
	Username    string // filled by reads, from users
	Name        string
	Tier        string
	Runtime     string
	State       string
	Error       string
	MemoryBytes int64
	CPUs        float64
	Pids        int64
	// TmpBytes sizes the sandbox's /tmp and FileSizeBytes is the largest file its
	// commands may write; 0 is the runner's default.
	TmpBytes      int64
	FileSizeBytes int64
	// DiskBytes bounds its workspace and /tmp on disk; 0 is the runner's default.
	DiskBytes int64
	App       App
	Env       []string
	CreatedAt time.Time
	UpdatedAt time.Time
	// Replica is the ID of the replica that runs it, or last ran it (replicas.go); empty
	// until it first starts.
	Replica string
}

// App is the template a sandbox runs: a command, the port it serves on inside the
// sandbox, and the label of the runtime build it serves.
type App struct {
	Command []string `json:"command,omitempty"`
	Port    int      `json:"port,omitempty"`
	Build   string   `json:"build,omitempty"`
	// Dir is where the command runs, relative to the workspace; empty is the workspace.
	Dir string `json:"dir,omitempty"`
	// HotReload: the app reloads changed files itself, so a restore need not restart it.
	HotReload bool `json:"hot_reload,omitempty"`
	// Provider is the runtime provider whose dev server this is, when a preview set it.
	Provider string `json:"provider,omitempty"`
}

const sandboxCols = `s.id, s.user_id, u.username, s.name, s.tier, s.runtime, s.state, s.error,
	s.memory_bytes, s.cpus, s.pids, s.tmp_bytes, s.file_size_bytes, s.disk_bytes, s.app, s.env, s.created_at, s.updated_at, s.replica`

func scanSandbox(sc scanner) (Sandbox, error) {
	var (
		sb               Sandbox
		app, env         string
		created, updated int64
	)
	err := sc.Scan(&sb.ID, &sb.UserID, &sb.Username, &sb.Name, &sb.Tier, &sb.Runtime, &sb.State, &sb.Error,
		&sb.MemoryBytes, &sb.CPUs, &sb.Pids, &sb.TmpBytes, &sb.FileSizeBytes, &sb.DiskBytes, &app, &env, &created, &updated, &sb.Replica)
	if err != nil {
		return Sandbox{}, err
	}
	if err := json.Unmarshal([]byte(app), &sb.App); err != nil {
		return Sandbox{}, fmt.Errorf("sandbox %s: stored app: %w", sb.ID, err)
	}
	if err := json.Unmarshal([]byte(env), &sb.Env); err != nil {
		return Sandbox{}, fmt.Errorf("sandbox %s: stored env: %w", sb.ID, err)
	}
	sb.CreatedAt, sb.UpdatedAt = fromNanos(created), fromNanos(updated)
	return sb, nil
}

// CreateSandbox records sb. A second sandbox of the same user with the same name is
// [errdefs.ErrAlreadyExists].
func (tx *Tx) CreateSandbox(ctx context.Context, sb Sandbox) error {
	app, err := json.Marshal(sb.App)
	if err != nil {
		return fmt.Errorf("sandbox app: %w", err)
	}
	if sb.Env == nil {
		sb.Env = []string{}
	}
	env, err := json.Marshal(sb.Env)
	if err != nil {
		return fmt.Errorf("sandbox env: %w", err)
	}
	_, err = tx.tx.ExecContext(ctx, `INSERT INTO sandboxes (id, user_id, name, tier, runtime, state, error,
		memory_bytes, cpus, pids, tmp_bytes, file_size_bytes, disk_bytes, app, env, created_at, updated_at, replica) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		sb.ID, sb.UserID, sb.Name, sb.Tier, sb.Runtime, sb.State, sb.Error, sb.MemoryBytes, sb.CPUs, sb.Pids, sb.TmpBytes, sb.FileSizeBytes, sb.DiskBytes,
		string(app), string(env), nanos(sb.CreatedAt), nanos(sb.UpdatedAt), sb.Replica)
	if err != nil {
		return fmt.Errorf("sandbox %q: %w", sb.Name, mapErr(err))
	}
	return nil
}

// SetSandboxState records a sandbox's state and, for failed and lost ones, why.
func (tx *Tx) SetSandboxState(ctx context.Context, id, state, why string, now time.Time) error {
	res, err := tx.tx.ExecContext(ctx, `UPDATE sandboxes SET state = ?, error = ?, updated_at = ? WHERE id = ?`,
		state, why, nanos(now), id)
	return affectedOne(res, err, "sandbox "+id)
}

// DeleteSandbox removes a sandbox's record; role pointers to it become empty.
func (tx *Tx) DeleteSandbox(ctx context.Context, id string) error {
	res, err := tx.tx.ExecContext(ctx, `DELETE FROM sandboxes WHERE id = ?`, id)
	return affectedOne(res, err, "sandbox "+id)
}

// SandboxByID returns the sandbox with id, or [errdefs.ErrNotFound].
func (s *Store) SandboxByID(ctx context.Context, id string) (Sandbox, error) {
	sb, err := scanSandbox(s.r.QueryRowContext(ctx, `SELECT `+sandboxCols+`
		FROM sandboxes s JOIN users u ON u.id = s.user_id WHERE s.id = ?`, id))
	if err != nil {
		return Sandbox{}, fmt.Errorf("sandbox %s: %w", id, mapErr(err))
	}
	return sb, nil
}

// ListSandboxes returns userID's sandboxes, or everyone's when userID is empty, oldest
// first.
func (s *Store) ListSandboxes(ctx context.Context, userID string) ([]Sandbox, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+sandboxCols+` FROM sandboxes s JOIN users u ON u.id = s.user_id
		WHERE (? = '' OR s.user_id = ?) ORDER BY s.created_at, s.id`, userID, userID)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", mapErr(err))
	}
	defer rows.Close()
	var out []Sandbox
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			return nil, fmt.Errorf("list sandboxes: %w", mapErr(err))
		}
		out = append(out, sb)
	}
	return out, rows.Err()
}

// Usage is what a user's sandboxes take, for quotas.
type Usage struct {
	Sandboxes   int
	MemoryBytes int64
}

// UserUsage counts userID's sandboxes and adds up their memory limits.
func (tx *Tx) UserUsage(ctx context.Context, userID string) (Usage, error) {
	var u Usage
	err := tx.tx.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(memory_bytes), 0) FROM sandboxes WHERE user_id = ?`,
		userID).Scan(&u.Sandboxes, &u.MemoryBytes)
	if err != nil {
		return Usage{}, fmt.Errorf("usage of %s: %w", userID, mapErr(err))
	}
	return u, nil
}

// Roles are a user's two role pointers. An empty ID means the role has no sandbox yet
// (or it was deleted).
type Roles struct {
	UserID     string
	LiveID     string
	DevID      string
	Generation int64
	UpdatedAt  time.Time
}

// RolesOf returns userID's roles; a user who never used them has empty ones.
func (s *Store) RolesOf(ctx context.Context, userID string) (Roles, error) {
	return rolesOf(ctx, cachedReads{s}, userID)
}

// RolesOf is [Store.RolesOf] inside a write transaction.
func (tx *Tx) RolesOf(ctx context.Context, userID string) (Roles, error) {
	return rolesOf(ctx, tx.tx, userID)
}

// AllRoles returns every user's roles.
func (s *Store) AllRoles(ctx context.Context) ([]Roles, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT user_id, coalesce(live_id, ''), coalesce(dev_id, ''), generation, updated_at FROM roles`)
	if err != nil {
		return nil, fmt.Errorf("roles: %w", mapErr(err))
	}
	defer rows.Close()
	var out []Roles
	for rows.Next() {
		var r Roles
		var updated int64
		if err := rows.Scan(&r.UserID, &r.LiveID, &r.DevID, &r.Generation, &updated); err != nil {
			return nil, fmt.Errorf("roles: %w", mapErr(err))
		}
		r.UpdatedAt = fromNanos(updated)
		out = append(out, r)
	}
	return out, rows.Err()
}

func rolesOf(ctx context.Context, q queryRower, userID string) (Roles, error) {
	r := Roles{UserID: userID}
	var updated int64
	err := q.QueryRowContext(ctx, `SELECT coalesce(live_id, ''), coalesce(dev_id, ''), generation, updated_at
		FROM roles WHERE user_id = ?`, userID).Scan(&r.LiveID, &r.DevID, &r.Generation, &updated)
	if err == sql.ErrNoRows {
		return r, nil
	}
	if err != nil {
		return Roles{}, fmt.Errorf("roles of %s: %w", userID, mapErr(err))
	}
	r.UpdatedAt = fromNanos(updated)
	return r, nil
}

// SetRole points userID's role ("live" or "dev") at sandboxID.
func (tx *Tx) SetRole(ctx context.Context, userID, role, sandboxID string, now time.Time) error {
	col := map[string]string{"live": "live_id", "dev": "dev_id"}[role]
	if col == "" {
		return fmt.Errorf("role %q: want live or dev: %w", role, errdefs.ErrInvalidArgument)
	}
	_, err := tx.tx.ExecContext(ctx, `INSERT INTO roles (user_id, `+col+`, updated_at) VALUES (?, ?, ?)
		ON CONFLICT (user_id) DO UPDATE SET `+col+` = excluded.`+col+`, updated_at = excluded.updated_at`,
		userID, sandboxID, nanos(now))
	if err != nil {
		return fmt.Errorf("set %s role of %s: %w", role, userID, mapErr(err))
	}
	return nil
}

// SwapRoles exchanges userID's live and dev pointers in one statement and returns the
// roles after the swap. Both roles must point at a sandbox.
func (tx *Tx) SwapRoles(ctx context.Context, userID string, now time.Time) (Roles, error) {
	res, err := tx.tx.ExecContext(ctx, `UPDATE roles SET live_id = dev_id, dev_id = live_id,
		generation = generation + 1, updated_at = ? WHERE user_id = ? AND live_id IS NOT NULL AND dev_id IS NOT NULL`,
		nanos(now), userID)
	if err != nil {
		return Roles{}, fmt.Errorf("swap roles of %s: %w", userID, mapErr(err))
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return Roles{}, fmt.Errorf("promote: both the live and the dev sandbox must exist first: %w", errdefs.ErrFailedPrecondition)
	}
	return tx.RolesOf(ctx, userID)
}

// SetSandboxApp records app as what sandbox id runs, from its next start.
func (tx *Tx) SetSandboxApp(ctx context.Context, id string, app App, now time.Time) error {
	b, err := json.Marshal(app)
	if err != nil {
		return fmt.Errorf("sandbox app: %w", err)
	}
	res, err := tx.tx.ExecContext(ctx, `UPDATE sandboxes SET app = ?, updated_at = ? WHERE id = ?`, string(b), nanos(now), id)
	return affectedOne(res, err, "sandbox "+id)
}

// SetSandboxLimits records sb's resource limits (memory, CPUs, pids, tmp, file size, disk) as
// sandbox sb.ID's; they apply from its next start.
func (tx *Tx) SetSandboxLimits(ctx context.Context, sb Sandbox, now time.Time) error {
	res, err := tx.tx.ExecContext(ctx, `UPDATE sandboxes SET memory_bytes = ?, cpus = ?, pids = ?, tmp_bytes = ?, file_size_bytes = ?,
		disk_bytes = ?, updated_at = ? WHERE id = ?`, sb.MemoryBytes, sb.CPUs, sb.Pids, sb.TmpBytes, sb.FileSizeBytes, sb.DiskBytes, nanos(now), sb.ID)
	return affectedOne(res, err, "sandbox "+sb.ID)
}
