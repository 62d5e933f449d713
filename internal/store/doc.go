// Package store is the control plane's durable state: one SQLite database (pure Go,
// modernc.org/sqlite) under the data dir, or a PostgreSQL database (pgx's database/sql
// driver; dialect.go is all that differs), holding accounts, recovery codes, sessions,
// API tokens, login attempts, the audit log and users' secrets (as ciphertext: package
// secrets encrypts them), with embedded, numbered schema migrations.
//
// # Concurrency
//
// SQLite allows one writer at a time. Writes go through a *sql.DB limited to one
// connection whose transactions begin IMMEDIATE, so writers queue in Go instead of
// racing for the database lock (where a transaction that read first and then tries
// to write can fail at once with SQLITE_BUSY, busy timeout or not). Reads use a
// separate pool of query-only connections; in WAL mode they never block the writer
// and the writer never blocks them. A busy timeout still covers other processes (a
// second paddock, the sqlite3 shell) holding the lock.
//
// On PostgreSQL the same holds: every write transaction first takes one advisory lock
// (see writerLockKey), so write transactions run one at a time across every process
// sharing the database, and reads use a pool of read-only connections.
//
// # Threat model
//
// The database file is trusted storage but is assumed to leak sooner or later
// (backups, a copied data dir). So it holds no secret that grants access by itself:
// session IDs, API tokens and recovery codes are stored as their SHA-256, passwords
// as Argon2id hashes, users' secrets as AEAD ciphertext under keys kept outside the
// database, and audit rows carry no secret. The file and its directory are
// created owner-only (0600 / 0700). Everything the store receives has been
// authenticated and validated by its caller (package auth); the store enforces the
// invariants that must hold whatever the caller does (unique usernames regardless
// of ASCII case, single-use recovery codes, foreign keys) with SQL constraints and
// single transactions.
//
// Errors are wrapped with the errdefs taxonomy: a missing row is
// [errdefs.ErrNotFound], a unique-constraint violation [errdefs.ErrAlreadyExists].
package store
