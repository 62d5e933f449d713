package store

import (
	"context"
	"database/sql"
	"sync"
)

// stmts caches prepared statements by their SQL, for one *sql.DB. On the hot paths (a
// broker resolution, a proxied request) parsing SQL again each time was a large share of
// the CPU: a statement is prepared once and kept for the life of the Store.
//
// The writer's pool has one connection, which a transaction holds: preparing on it from
// inside a transaction would wait for ever. So the writer's statements are prepared up
// front (prepareWrites), and get only looks them up there.
type stmts struct {
	db   *db
	lazy bool // prepare on first use (the readers' pool)
	mu   sync.Mutex
	m    map[string]*sql.Stmt
}

func newStmts(pool *db, lazy bool) *stmts {
	return &stmts{db: pool, lazy: lazy, m: map[string]*sql.Stmt{}}
}

// hotWrites are the writer's statements prepared at Open.
var hotWrites = []string{appendAuditSQL, createLeaseSQL, addUsageSQL}

func (c *stmts) prepare(ctx context.Context, queries ...string) error {
	for _, q := range queries {
		st, err := c.db.PrepareContext(ctx, q)
		if err != nil {
			return err
		}
		c.m[q] = st
	}
	return nil
}

// get returns the statement for query, or nil when it is not prepared (and may not be).
func (c *stmts) get(ctx context.Context, query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.m[query]; ok || !c.lazy {
		return st
	}
	st, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil // run unprepared: the error comes back from there
	}
	c.m[query] = st
	return st
}

// exec runs a cached statement in the transaction.
func (tx *Tx) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := tx.stmt(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return tx.tx.ExecContext(ctx, query, args...)
}

// queryRow runs a cached statement that writes and returns a row (RETURNING) in the
// transaction.
func (tx *Tx) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	if st := tx.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return tx.tx.QueryRowContext(ctx, query, args...)
}

// stmt is query's prepared statement bound to the transaction, or nil (during migrations,
// or when it is not prepared): then it runs unprepared.
func (tx *Tx) stmt(ctx context.Context, query string) *sql.Stmt {
	if tx.stmts == nil {
		return nil
	}
	if st := tx.stmts.get(ctx, query); st != nil {
		return tx.tx.StmtContext(ctx, st)
	}
	return nil
}

// queryRow runs a cached read-only statement. A statement that fails to prepare is run
// unprepared, which reports the same error through the Row.
func (s *Store) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	st := s.rstmts.get(ctx, query)
	if st == nil {
		return s.r.QueryRowContext(ctx, query, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

// cachedReads runs the readers' statements prepared (see stmts).
type cachedReads struct{ s *Store }

func (c cachedReads) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return c.s.queryRow(ctx, query, args...)
}

func (c cachedReads) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st := c.s.rstmts.get(ctx, query)
	if st == nil {
		return c.s.r.QueryContext(ctx, query, args...)
	}
	return st.QueryContext(ctx, args...)
}
