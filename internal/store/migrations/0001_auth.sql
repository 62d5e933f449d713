-- 0001: what authentication needs: accounts, recovery codes, sessions, API tokens,
-- login attempts (rate limiting that survives restarts) and the audit log.
--
-- Times are INTEGER Unix nanoseconds (UTC). Secrets are never stored: only their
-- SHA-256 (session IDs, API tokens, recovery codes) or an Argon2id PHC string (passwords).

CREATE TABLE users (
    id            TEXT    PRIMARY KEY,
    -- NOCASE folds ASCII only; the auth package restricts usernames to ASCII, so this
    -- makes "Alice" and "alice" the same account at the database level too.
    username      TEXT    NOT NULL UNIQUE COLLATE NOCASE,
    password_hash TEXT    NOT NULL,
    role          TEXT    NOT NULL CHECK (role IN ('user', 'admin')),
    created_at    INTEGER NOT NULL
) STRICT;

CREATE TABLE recovery_codes (
    user_id   TEXT    NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    code_hash BLOB    NOT NULL CHECK (length(code_hash) = 32),
    used_at   INTEGER,
    PRIMARY KEY (user_id, code_hash)
) STRICT;

-- The CSRF secret is not stored: it is derived from the session ID (which only the
-- cookie holder has), so a leaked database yields neither sessions nor CSRF tokens.
CREATE TABLE sessions (
    id_hash      BLOB    PRIMARY KEY CHECK (length(id_hash) = 32),
    user_id      TEXT    NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    last_seen_at INTEGER NOT NULL,
    user_agent   TEXT    NOT NULL DEFAULT '',
    ip           TEXT    NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX sessions_user ON sessions (user_id);
CREATE INDEX sessions_expires ON sessions (expires_at);
CREATE INDEX sessions_last_seen ON sessions (last_seen_at);

CREATE TABLE api_tokens (
    id           TEXT    PRIMARY KEY,
    user_id      TEXT    NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         TEXT    NOT NULL,
    token_hash   BLOB    NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    prefix       TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    last_used_at INTEGER,
    revoked_at   INTEGER
) STRICT;
CREATE INDEX api_tokens_user ON api_tokens (user_id);

CREATE TABLE login_attempts (
    key TEXT    NOT NULL,
    at  INTEGER NOT NULL
) STRICT;
CREATE INDEX login_attempts_key_at ON login_attempts (key, at);
CREATE INDEX login_attempts_at ON login_attempts (at);

-- actor_user_id is deliberately not a foreign key: the audit log outlives the accounts
-- it mentions.
CREATE TABLE audit_events (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    at            INTEGER NOT NULL,
    actor_user_id TEXT    NOT NULL DEFAULT '',
    action        TEXT    NOT NULL,
    target        TEXT    NOT NULL DEFAULT '',
    detail        TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(detail))
) STRICT;
CREATE INDEX audit_events_at ON audit_events (at);
CREATE INDEX audit_events_actor ON audit_events (actor_user_id, at);
