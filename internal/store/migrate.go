package store

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migration is one numbered schema change, migrations/NNNN_name.sql.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded migrations in order. Numbers must be 1..n without gaps.
func migrations() ([]migration, error) {
	files, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, f := range files {
		base := strings.TrimSuffix(path.Base(f), ".sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must be NNNN_name.sql", f)
		}
		b, err := migrationFS.ReadFile(f)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: name, sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %d (%s): expected version %d; numbers must not skip", m.version, m.name, i+1)
		}
	}
	return ms, nil
}

// SchemaVersion is the newest schema version this binary knows.
func SchemaVersion() int {
	ms, err := migrations()
	if err != nil {
		return 0
	}
	return len(ms)
}

// migrate applies every pending migration in one write transaction, so a crash
// leaves the schema either before or after, never half-way; the IMMEDIATE
// transaction (PostgreSQL: the writer lock) also serializes two processes migrating the
// same database.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	return s.Update(ctx, func(tx *Tx) error {
		if s.b == backendPostgres {
			if _, err := tx.tx.ExecContext(ctx, pgPrelude); err != nil {
				return fmt.Errorf("prepare the database for paddock's schema: %w", mapErr(err))
			}
		}
		if _, err := tx.tx.ExecContext(ctx, s.schema(`CREATE TABLE IF NOT EXISTS schema_migrations (
			version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT`)); err != nil {
			return fmt.Errorf("create schema_migrations: %w", mapErr(err))
		}
		var cur int
		if err := tx.tx.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&cur); err != nil {
			return fmt.Errorf("read schema version: %w", mapErr(err))
		}
		if cur > len(ms) {
			return fmt.Errorf("database %s has schema version %d but this paddock knows only up to %d; run a newer paddock (or restore a backup): %w",
				s.path, cur, len(ms), errdefs.ErrFailedPrecondition)
		}
		for _, m := range ms[cur:] {
			if _, err := tx.tx.ExecContext(ctx, s.schema(m.sql)); err != nil {
				return fmt.Errorf("migration %04d_%s: %w", m.version, m.name, mapErr(err))
			}
			if _, err := tx.tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				m.version, m.name, nanos(time.Now())); err != nil {
				return fmt.Errorf("record migration %d: %w", m.version, mapErr(err))
			}
		}
		return nil
	})
}

// schema is a migration in the backend's dialect.
func (s *Store) schema(migration string) string {
	if s.b == backendPostgres {
		return pgSchema(migration)
	}
	return migration
}

// AppliedVersion returns the highest migration recorded in the database.
func (s *Store) AppliedVersion(ctx context.Context) (int, error) {
	var v int
	err := s.r.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&v)
	return v, mapErr(err)
}
