package store

import (
	"context"
	"database/sql"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// The store's SQL is written once, in SQLite's dialect: ? placeholders, SQLite's column
// types, STRICT tables. This file is the one place that turns it into PostgreSQL's: every
// query passes through db and txn, which rebind placeholders, and every migration through
// pgSchema, which rewrites the column types and table options. Everything else (upserts
// with ON CONFLICT ... excluded, RETURNING, partial indexes) is written in the subset both
// speak.

// backend names the database a Store talks to.
type backend int

const (
	backendSQLite backend = iota
	backendPostgres
)

func (b backend) String() string {
	if b == backendPostgres {
		return "postgres"
	}
	return "sqlite"
}

// db is a pool that takes the store's SQL and speaks it to its backend.
type db struct {
	*sql.DB
	b backend
}

func (d *db) q(query string) string {
	if d.b == backendPostgres {
		return rebindCached(query)
	}
	return query
}

func (d *db) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return d.DB.ExecContext(ctx, d.q(query), args...)
}

func (d *db) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return d.DB.QueryContext(ctx, d.q(query), args...)
}

func (d *db) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return d.DB.QueryRowContext(ctx, d.q(query), args...)
}

func (d *db) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return d.DB.PrepareContext(ctx, d.q(query))
}

func (d *db) Exec(query string, args ...any) (sql.Result, error) {
	return d.ExecContext(context.Background(), query, args...)
}

func (d *db) Query(query string, args ...any) (*sql.Rows, error) {
	return d.QueryContext(context.Background(), query, args...)
}

func (d *db) QueryRow(query string, args ...any) *sql.Row {
	return d.QueryRowContext(context.Background(), query, args...)
}

func (d *db) Prepare(query string) (*sql.Stmt, error) {
	return d.PrepareContext(context.Background(), query)
}

func (d *db) BeginTx(ctx context.Context, opts *sql.TxOptions) (*txn, error) {
	tx, err := d.DB.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &txn{Tx: tx, b: d.b}, nil
}

// txn is a transaction that takes the store's SQL, like db.
type txn struct {
	*sql.Tx
	b backend
}

func (t *txn) q(query string) string {
	if t.b == backendPostgres {
		return rebindCached(query)
	}
	return query
}

func (t *txn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return t.Tx.ExecContext(ctx, t.q(query), args...)
}

func (t *txn) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return t.Tx.QueryContext(ctx, t.q(query), args...)
}

func (t *txn) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return t.Tx.QueryRowContext(ctx, t.q(query), args...)
}

func (t *txn) Exec(query string, args ...any) (sql.Result, error) {
	return t.ExecContext(context.Background(), query, args...)
}

func (t *txn) QueryRow(query string, args ...any) *sql.Row {
	return t.QueryRowContext(context.Background(), query, args...)
}

// rebinds caches rebind's answers: the store's queries are a fixed set of constants.
var rebinds sync.Map // string -> string

func rebindCached(query string) string {
	if v, ok := rebinds.Load(query); ok {
		return v.(string)
	}
	out := rebind(query)
	rebinds.Store(query, out)
	return out
}

// rebind turns ? placeholders into PostgreSQL's $1, $2, ..., leaving alone what is quoted
// ('...', "..."), dollar-quoted ($$...$$) or commented out (-- to the end of the line).
func rebind(query string) string {
	if !strings.Contains(query, "?") {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 8)
	n := 0
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(query) && query[j] != c {
				j++
			}
			b.WriteString(query[i:min(j+1, len(query))])
			i = j
		case c == '-' && i+1 < len(query) && query[i+1] == '-':
			j := strings.IndexByte(query[i:], '\n')
			if j < 0 {
				j = len(query) - i
			}
			b.WriteString(query[i : i+j])
			i += j - 1
		case c == '$' && i+1 < len(query) && query[i+1] == '$':
			j := strings.Index(query[i+2:], "$$")
			end := len(query)
			if j >= 0 {
				end = i + 2 + j + 2
			}
			b.WriteString(query[i:end])
			i = end - 1
		case c == '?':
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// pgPrelude makes, in a PostgreSQL database, what the migrations take from SQLite: the
// NOCASE collation (ASCII case folded, as SQLite's; an ICU level-2 collation, which also
// folds the rest of Unicode, which usernames never hold), json_valid and unixepoch. It
// runs before the migrations, in their transaction.
const pgPrelude = `
CREATE COLLATION IF NOT EXISTS nocase (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
CREATE OR REPLACE FUNCTION json_valid(t text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
	PERFORM t::json;
	RETURN true;
EXCEPTION WHEN others THEN
	RETURN false;
END $$;
CREATE OR REPLACE FUNCTION unixepoch() RETURNS bigint LANGUAGE sql STABLE AS $$ SELECT extract(epoch FROM now())::bigint $$;
`

var (
	sqlComment    = regexp.MustCompile(`--[^\n]*`)
	createTable   = regexp.MustCompile(`(?is)^\s*CREATE\s+TABLE\s+(IF\s+NOT\s+EXISTS\s+)?\w+\s*\(`)
	tableOptions  = regexp.MustCompile(`(?is)\)\s*STRICT\s*(,\s*WITHOUT\s+ROWID\s*)?$`)
	withoutRowid  = regexp.MustCompile(`(?i)WITHOUT\s+ROWID`)
	autoincrement = regexp.MustCompile(`(?i)\bINTEGER\s+PRIMARY\s+KEY\s+AUTOINCREMENT\b`)
	integerPK     = regexp.MustCompile(`(?i)\bINTEGER\s+PRIMARY\s+KEY\b`)
	integerType   = regexp.MustCompile(`\bINTEGER\b`)
	blobType      = regexp.MustCompile(`\bBLOB\b`)
	realType      = regexp.MustCompile(`\bREAL\b`)
	textType      = regexp.MustCompile(`\bTEXT\b`)
)

// pgSchema rewrites a migration written for SQLite into PostgreSQL's dialect:
//   - INTEGER is BIGINT (SQLite's integers are 64-bit; times are Unix nanoseconds), REAL
//     is DOUBLE PRECISION, BLOB is BYTEA;
//   - TEXT compares bytewise (COLLATE "C"), as SQLite's BINARY does, whatever the
//     database's locale, so that ORDER BY and uniqueness agree between the two; a column
//     declared COLLATE NOCASE keeps that, made by pgPrelude;
//   - INTEGER PRIMARY KEY AUTOINCREMENT is an identity column;
//   - STRICT and WITHOUT ROWID go; a table that has a rowid in SQLite (and no INTEGER
//     PRIMARY KEY to alias it) gets an identity column named rowid, so that queries
//     by rowid mean the same.
func pgSchema(migration string) string {
	var out []string
	for _, stmt := range strings.Split(sqlComment.ReplaceAllString(migration, ""), ";") {
		if strings.TrimSpace(stmt) == "" {
			continue
		}
		out = append(out, pgStatement(strings.TrimSpace(stmt)))
	}
	return strings.Join(out, ";\n") + ";\n"
}

func pgStatement(stmt string) string {
	isTable := createTable.MatchString(stmt)
	hasRowid := isTable && !withoutRowid.MatchString(stmt) && !integerPK.MatchString(stmt)
	stmt = tableOptions.ReplaceAllString(stmt, ")")
	stmt = autoincrement.ReplaceAllString(stmt, "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY")
	stmt = integerType.ReplaceAllString(stmt, "BIGINT")
	stmt = blobType.ReplaceAllString(stmt, "BYTEA")
	stmt = realType.ReplaceAllString(stmt, "DOUBLE PRECISION")
	lines := strings.Split(stmt, "\n")
	for i, l := range lines {
		if !strings.Contains(strings.ToUpper(l), "COLLATE") {
			lines[i] = textType.ReplaceAllString(l, `TEXT COLLATE "C"`)
		}
	}
	stmt = strings.Join(lines, "\n")
	if hasRowid {
		loc := createTable.FindStringIndex(stmt)
		stmt = stmt[:loc[1]] + "\n    rowid BIGINT GENERATED BY DEFAULT AS IDENTITY UNIQUE," + stmt[loc[1]:]
	}
	return stmt
}
