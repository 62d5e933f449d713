package store

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// BackupSQLite writes a consistent copy of the SQLite database src to dst (which must not
// exist) while other processes keep using src: VACUUM INTO reads src in one read
// transaction, so the copy is the database as of one commit, and a writer is never
// blocked. It opens src without migrating it: a backup never changes the database it
// copies. It returns the copy's schema version.
func BackupSQLite(ctx context.Context, src, dst string) (int, error) {
	if _, err := os.Stat(src); err != nil {
		return 0, fmt.Errorf("backup: no paddock database at %s: %w", src, errdefs.ErrNotFound)
	}
	if strings.ContainsAny(src, "?#") {
		return 0, fmt.Errorf("backup: database path %q must contain no '?' or '#': %w", src, errdefs.ErrInvalidArgument)
	}
	if _, err := os.Lstat(dst); err == nil {
		return 0, fmt.Errorf("backup: %s already exists: %w", dst, errdefs.ErrAlreadyExists)
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	db, err := sql.Open("sqlite", src+"?"+q.Encode())
	if err != nil {
		return 0, fmt.Errorf("backup: open %s: %w", src, err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, dst); err != nil {
		return 0, fmt.Errorf("backup: copy %s to %s: %w", src, dst, mapErr(err))
	}
	if err := os.Chmod(dst, 0o600); err != nil {
		return 0, fmt.Errorf("backup: %w", err)
	}
	return CheckSQLiteCopy(ctx, dst)
}

// CheckSQLiteCopy checks a database copy whole (PRAGMA integrity_check) and returns its
// schema version; a copy that is not a paddock database, or is damaged, is refused with
// [errdefs.ErrDataLoss].
func CheckSQLiteCopy(ctx context.Context, path string) (int, error) {
	if _, err := os.Stat(path); err != nil {
		return 0, fmt.Errorf("database copy %s: %w", path, errdefs.ErrNotFound)
	}
	q := url.Values{}
	q.Add("_pragma", "query_only(1)")
	db, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return 0, fmt.Errorf("database copy %s: %w", path, err)
	}
	defer db.Close()
	var ok string
	if err := db.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&ok); err != nil || ok != "ok" {
		return 0, fmt.Errorf("database copy %s is damaged (integrity check: %q %v): %w", path, ok, err, errdefs.ErrDataLoss)
	}
	var v int
	if err := db.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("database copy %s is not a paddock database (no schema_migrations): %w", path, errdefs.ErrDataLoss)
	}
	return v, nil
}

// PostgresTool finds one of PostgreSQL's client programs (pg_dump, pg_restore):
// $PADDOCK_PG_BINDIR, else the newest /usr/lib/postgresql/N/bin (Debian's layout, whose
// pg_dump dumps any server up to its own major), else $PATH.
func PostgresTool(name string) (string, error) {
	if d := os.Getenv("PADDOCK_PG_BINDIR"); d != "" {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s: not in PADDOCK_PG_BINDIR %s: %w", name, d, errdefs.ErrNotFound)
		}
		return p, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	major := func(d string) int { n, _ := strconv.Atoi(filepath.Base(filepath.Dir(d))); return n }
	sort.Slice(dirs, func(i, j int) bool { return major(dirs[i]) > major(dirs[j]) })
	for _, d := range dirs {
		if p := filepath.Join(d, name); fileExists(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s is not installed: install Debian's postgresql-client (scripts/setup.sh installs postgresql-15, which brings it): %w", name, errdefs.ErrNotFound)
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// pgCommand runs a PostgreSQL client program against target. The password, if the URL
// has one, goes in PGPASSWORD and not on the command line, where other users could read
// it; errors quote the URL redacted.
func pgCommand(ctx context.Context, tool, target string, args ...string) error {
	bin, err := PostgresTool(tool)
	if err != nil {
		return err
	}
	if err := CheckPostgresURL(target); err != nil {
		return err
	}
	u, err := url.Parse(target)
	if err != nil {
		return fmt.Errorf("%s: not a PostgreSQL connection URL: %w", RedactURL(target), errdefs.ErrInvalidArgument)
	}
	env := os.Environ()
	if pw, ok := u.User.Password(); ok {
		env = append(env, "PGPASSWORD="+pw)
		u.User = url.User(u.User.Username())
	}
	if q := u.Query(); q.Has("password") {
		env = append(env, "PGPASSWORD="+q.Get("password"))
		q.Del("password")
		u.RawQuery = q.Encode()
	}
	cmd := exec.CommandContext(ctx, bin, append(args, "--dbname="+u.String())...)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 2000 {
			msg = msg[len(msg)-2000:]
		}
		return fmt.Errorf("%s %s: %v: %s: %w", tool, RedactURL(target), err, msg, errdefs.ErrUnavailable)
	}
	return nil
}

// BackupPostgres writes a consistent copy of the PostgreSQL database target to dst with
// pg_dump (its custom format, which pg_restore reads): pg_dump reads the whole database
// in one repeatable-read transaction, so the copy is as of one moment while paddock
// keeps serving.
func BackupPostgres(ctx context.Context, target, dst string) error {
	if _, err := os.Lstat(dst); err == nil {
		return fmt.Errorf("backup: %s already exists: %w", dst, errdefs.ErrAlreadyExists)
	}
	if err := pgCommand(ctx, "pg_dump", target, "--format=custom", "--no-owner", "--no-privileges", "--file="+dst); err != nil {
		os.Remove(dst)
		return fmt.Errorf("backup: %w", err)
	}
	return os.Chmod(dst, 0o600)
}

// RestorePostgres loads a pg_dump copy (BackupPostgres) into the PostgreSQL database
// target, which must be empty: restoring over a database that already has paddock's
// tables is refused rather than mixed.
func RestorePostgres(ctx context.Context, target, dump string) error {
	if _, err := os.Stat(dump); err != nil {
		return fmt.Errorf("restore: %s: %w", dump, errdefs.ErrNotFound)
	}
	cfg, err := pgx.ParseConfig(target)
	if err != nil {
		return fmt.Errorf("restore: %s: not a PostgreSQL connection URL: %w", RedactURL(target), errdefs.ErrInvalidArgument)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("restore: %s: %w", RedactURL(target), unavailable(err))
	}
	var has bool
	err = conn.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&has)
	conn.Close(ctx)
	if err != nil {
		return fmt.Errorf("restore: %s: %w", RedactURL(target), unavailable(err))
	}
	if has {
		return fmt.Errorf("restore: the database %s already holds paddock's tables: restore into a new, empty database: %w",
			RedactURL(target), errdefs.ErrAlreadyExists)
	}
	if err := pgCommand(ctx, "pg_restore", target, "--no-owner", "--no-privileges", "--exit-on-error", "--single-transaction", dump); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	return nil
}
