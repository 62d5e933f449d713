package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// writerLockKey is the PostgreSQL advisory lock every write transaction takes first: the
// counterpart of SQLite's BEGIN IMMEDIATE. The store's transactions read and then write
// what they read (a quota counted before a sandbox is made, a login limit checked before
// an attempt is recorded, a secret's version read before it is bumped, the roles read
// back after the promotion's swap); SQLite's single writer makes each of them atomic, and
// this lock does the same on PostgreSQL, for every paddock process sharing the database.
const writerLockKey int64 = 0x7061646430636b // "padd0ck"

// connectTimeout bounds a connection attempt when the URL sets no connect_timeout.
const connectTimeout = 10 * time.Second

// IsPostgresURL says whether target names a PostgreSQL database rather than a SQLite file.
func IsPostgresURL(target string) bool {
	return strings.HasPrefix(target, "postgres://") || strings.HasPrefix(target, "postgresql://")
}

// RedactURL returns a PostgreSQL URL without its password, for logs and errors; what does
// not parse is replaced whole, since it may hold one.
func RedactURL(target string) string {
	u, err := url.Parse(target)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// CheckPostgresURL says whether target parses as a PostgreSQL connection URL, without
// connecting. The error never quotes a password.
func CheckPostgresURL(target string) error {
	if _, err := pgx.ParseConfig(target); err != nil {
		return fmt.Errorf("%s: not a PostgreSQL connection URL: %w", RedactURL(target), errdefs.ErrInvalidArgument)
	}
	return nil
}

// openPostgres opens the PostgreSQL database at target, through pgx's database/sql
// driver so that both backends share every query's code. The readers' connections are
// read-only by default, as SQLite's are query_only.
func openPostgres(ctx context.Context, target string) (*Store, error) {
	s := &Store{path: RedactURL(target), b: backendPostgres}
	wcfg, err := pgx.ParseConfig(target)
	if err != nil {
		// pgx's parse errors may quote the URL, password and all.
		return nil, fmt.Errorf("store %s: not a PostgreSQL connection URL: %w", s.path, errdefs.ErrInvalidArgument)
	}
	if wcfg.ConnectTimeout == 0 {
		// A server that does not answer (a host gone, a firewall dropping packets) fails
		// a request after this rather than holding it.
		wcfg.ConnectTimeout = connectTimeout
	}
	s.pgcfg = wcfg.Copy()
	rcfg := wcfg.Copy()
	rcfg.RuntimeParams["default_transaction_read_only"] = "on"
	w, r := stdlib.OpenDB(*wcfg), stdlib.OpenDB(*rcfg)
	if err := w.PingContext(ctx); err != nil {
		w.Close()
		r.Close()
		return nil, fmt.Errorf("open database %s: %w", s.path, unavailable(err))
	}
	return s.open(ctx, w, r)
}

// lockWriter makes tx the only write transaction of the database until it ends (see
// writerLockKey). SQLite's writer already is.
func (s *Store) lockWriter(ctx context.Context, tx *txn) error {
	if s.b != backendPostgres {
		return nil
	}
	if _, err := tx.Tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, writerLockKey); err != nil {
		return fmt.Errorf("take the writer lock: %w", mapErr(err))
	}
	return nil
}

// unavailable wraps an error reaching the server as [errdefs.ErrUnavailable].
func unavailable(err error) error {
	if errors.Is(err, errdefs.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", errdefs.ErrUnavailable, err)
}

// dbUnavailable is the database gone away (PostgreSQL restarting, stopped, unreachable): an
// [errdefs.ErrUnavailable] whose message names the database and says what happened,
// without the server's address or the connection's internals.
type dbUnavailable struct {
	err    error
	reason string
}

func (e *dbUnavailable) Error() string {
	return "the database is unavailable: " + e.reason + "; try again shortly"
}

func (e *dbUnavailable) Unwrap() []error { return []error{errdefs.ErrUnavailable, e.err} }

// goneAway wraps err as [dbUnavailable] when it says the connection to PostgreSQL failed
// or could not be made, and returns nil otherwise.
func goneAway(err error) error {
	var d *dbUnavailable
	if errors.As(err, &d) {
		return err
	}
	var pe *pgconn.PgError
	var ce *pgconn.ConnectError
	var ne net.Error
	switch {
	case errors.As(err, &pe):
		if strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57P") {
			return &dbUnavailable{err: err, reason: "the server ended the connection (" + pe.Code + ": " + pe.Message + ")"}
		}
		return nil
	case errors.As(err, &ce):
		return &dbUnavailable{err: err, reason: "cannot connect"}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return nil // the caller's, which also satisfies net.Error
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF), errors.Is(err, driver.ErrBadConn),
		errors.Is(err, sql.ErrConnDone), errors.As(err, &ne), pgconn.SafeToRetry(err):
		return &dbUnavailable{err: err, reason: "the connection was lost"}
	}
	return nil
}

// mapPostgresErr places PostgreSQL's errors in the taxonomy, like mapErr does SQLite's.
func mapPostgresErr(err error) (error, bool) {
	if e := goneAway(err); e != nil {
		return e, true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "23505":
			return constraint{errdefs.ErrAlreadyExists, err}, true
		case pe.Code == "23503":
			return constraint{errdefs.ErrNotFound, err}, true
		case pe.Code == "23514" || pe.Code == "23502" || pe.Code == "22P02":
			return constraint{errdefs.ErrInvalidArgument, err}, true
		case pe.Code == "40001" || pe.Code == "40P01" || pe.Code == "55P03" ||
			strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57P") || strings.HasPrefix(pe.Code, "53"):
			// Serialization failures, deadlocks, lock timeouts, lost connections, a
			// server shutting down or out of resources: try again later.
			return unavailable(err), true
		}
		return err, true
	}
	return nil, false
}
