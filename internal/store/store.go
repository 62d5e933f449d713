package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// busyTimeout bounds how long a connection waits for a lock held by another process
// before failing with SQLITE_BUSY. Within one process the writer pool already queues.
const busyTimeout = 10 * time.Second

// Store is the control plane's database: SQLite (the default, a file in the data dir) or
// PostgreSQL. It is safe for concurrent use.
type Store struct {
	path string // the SQLite file, or the PostgreSQL URL without its password
	b    backend
	w    *db // exactly one connection: all writes queue here
	r    *db // query-only connections for reads
	// sessionByHash is prepared once: it runs on every authenticated request, and
	// parsing its SQL each time was a quarter of a proxied request's CPU.
	sessionByHash *sql.Stmt
	// wstmts and rstmts cache other hot statements of the writer and the readers.
	wstmts, rstmts *stmts
	// pgcfg connects Listen's connections (PostgreSQL); hub delivers notifications within
	// the process (SQLite).
	pgcfg *pgx.ConnConfig
	hub   hub
	// audit queues the events of AuditLater for a writer in the background.
	audit auditQueue
}

// Open opens the database target and applies any pending migrations. A target that is a
// postgres:// (or postgresql://) URL is a PostgreSQL database, which must exist; anything
// else is the path of a SQLite file, created if missing, with its directory. A database
// written by a newer paddock is refused with [errdefs.ErrFailedPrecondition].
func Open(ctx context.Context, target string) (*Store, error) {
	if IsPostgresURL(target) {
		return openPostgres(ctx, target)
	}
	abs, err := prepareFile(target)
	if err != nil {
		return nil, err
	}
	s := &Store{path: abs, b: backendSQLite}
	w, err := sql.Open("sqlite", dsn(abs, true))
	if err != nil {
		return nil, fmt.Errorf("open database %s: %w", abs, err)
	}
	r, err := sql.Open("sqlite", dsn(abs, false))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open database %s: %w", abs, err)
	}
	return s.open(ctx, w, r)
}

// open finishes Open with the backend's two pools: it migrates through the writer, sizes
// the pools and prepares the hot statements.
func (s *Store) open(ctx context.Context, w, r *sql.DB) (*Store, error) {
	s.w, s.r = &db{DB: w, b: s.b}, &db{DB: r, b: s.b}
	s.w.SetMaxOpenConns(1)
	s.w.SetConnMaxIdleTime(0)
	if err := s.migrate(ctx); err != nil {
		s.w.Close()
		s.r.Close()
		return nil, err
	}
	n := max(4, runtime.GOMAXPROCS(0))
	s.r.SetMaxOpenConns(n)
	s.r.SetMaxIdleConns(n)
	s.wstmts, s.rstmts = newStmts(s.w, false), newStmts(s.r, true)
	if err := s.wstmts.prepare(ctx, hotWrites...); err != nil {
		s.Close()
		return nil, fmt.Errorf("open database %s: %w", s.path, mapErr(err))
	}
	var err error
	if s.sessionByHash, err = s.r.PrepareContext(ctx, sessionByHashSQL); err != nil {
		s.Close()
		return nil, fmt.Errorf("open database %s: %w", s.path, mapErr(err))
	}
	return s, nil
}

// prepareFile makes path absolute, creates its directory (0700) and the file (0600)
// so that SQLite never creates them with the process umask.
func prepareFile(path string) (string, error) {
	if path == "" || strings.ContainsAny(path, "?#") {
		return "", fmt.Errorf("database path %q: must be non-empty and contain no '?' or '#': %w", path, errdefs.ErrInvalidArgument)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("database path %q: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return "", fmt.Errorf("create database directory: %w", err)
	}
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return "", fmt.Errorf("create database file: %w", err)
	}
	return abs, f.Close()
}

// dsn builds the connection string. Pragmas run on every new connection, since
// foreign_keys and busy_timeout are per connection. synchronous=FULL: the auth tables
// and the audit log must not lose an acknowledged commit to a power cut.
func dsn(path string, writer bool) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	if writer {
		q.Set("_txlock", "immediate")
	} else {
		q.Add("_pragma", "query_only(1)")
	}
	return path + "?" + q.Encode()
}

// Path returns the SQLite database file's absolute path, or the PostgreSQL URL without
// its password.
func (s *Store) Path() string { return s.path }

// Backend is "sqlite" or "postgres".
func (s *Store) Backend() string { return s.b.String() }

// Close commits the audit events still queued and closes both pools.
func (s *Store) Close() error {
	s.closeAudit()
	if s.sessionByHash != nil {
		s.sessionByHash.Close()
	}
	return errors.Join(s.r.Close(), s.w.Close())
}

// Ping checks that the database answers reads and that the writer is usable.
func (s *Store) Ping(ctx context.Context) error {
	for _, pool := range []*db{s.r, s.w} {
		if err := pool.PingContext(ctx); err != nil {
			if e := goneAway(err); e != nil {
				return fmt.Errorf("store: %w", e)
			}
			return fmt.Errorf("store: %w: %w", errdefs.ErrUnavailable, err)
		}
	}
	return nil
}

// Update runs fn in one write transaction, committed if fn returns nil and rolled
// back otherwise. Writes are serialized: keep fn short and never do slow work
// (password hashing, network calls) inside it.
//
// On PostgreSQL, a transaction whose connection fails before fn runs is tried once more
// on a new connection (nothing was written). One that fails inside fn was rolled back by
// the server and fails as unavailable. One whose commit fails on a lost connection may or
// may not have been applied: it fails as unavailable, saying so, and is never tried again.
func (s *Store) Update(ctx context.Context, fn func(*Tx) error) error {
	tx, err := s.begin(ctx)
	if err != nil && s.b == backendPostgres && goneAway(err) != nil && ctx.Err() == nil {
		tx, err = s.begin(ctx)
	}
	if err != nil {
		return err
	}
	t := &Tx{tx: tx, stmts: s.wstmts}
	if err := fn(t); err != nil {
		_ = tx.Rollback()
		if s.b == backendPostgres {
			if e := goneAway(err); e != nil && !errors.Is(err, errdefs.ErrUnavailable) {
				return fmt.Errorf("%w (nothing was written)", e)
			}
		}
		return err
	}
	if err := tx.Commit(); err != nil {
		if s.b == backendPostgres && goneAway(err) != nil {
			return fmt.Errorf("commit: %w (whether the change was applied is unknown: look before trying again)", goneAway(err))
		}
		return fmt.Errorf("commit: %w", mapErr(err))
	}
	s.hub.deliver(t.notes)
	return nil
}

// begin starts a write transaction holding the writer lock.
func (s *Store) begin(ctx context.Context) (*txn, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", mapErr(err))
	}
	if err := s.lockWriter(ctx, tx); err != nil {
		_ = tx.Rollback()
		return nil, err
	}
	return tx, nil
}

// Tx is a write transaction, valid only inside the function given to [Store.Update].
type Tx struct {
	tx    *txn
	stmts *stmts // nil during migrations
	notes []note // SQLite's notifications, delivered after the commit
}

// NewID returns a random 128-bit identifier in hex, used for users and API tokens.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// mapErr wraps SQLite's and PostgreSQL's errors with their place in the taxonomy.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if e, ok := mapPostgresErr(err); ok {
		return e
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return constraint{errdefs.ErrAlreadyExists, err}
		case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
			return constraint{errdefs.ErrNotFound, err}
		case sqlite3.SQLITE_CONSTRAINT_CHECK, sqlite3.SQLITE_CONSTRAINT_NOTNULL:
			return constraint{errdefs.ErrInvalidArgument, err}
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return fmt.Errorf("%w: %w", errdefs.ErrUnavailable, err)
		}
	}
	if errors.Is(err, sql.ErrNoRows) {
		return errdefs.ErrNotFound
	}
	return err
}

// constraint is a violated constraint: its text is its class alone ("already exists"),
// for the caller to say what of; the database's own text, which names tables and
// columns, stays reachable by errors.As for the server's log, never for a client.
type constraint struct {
	class error
	cause error
}

func (e constraint) Error() string   { return e.class.Error() }
func (e constraint) Unwrap() []error { return []error{e.class, e.cause} }

// nanos and fromNanos convert times to and from the stored representation.
func nanos(t time.Time) int64 { return t.UnixNano() }

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

func fromNullNanos(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return fromNanos(n.Int64)
}
