-- 0014: several `paddock serve` replicas on one database. Each replica registers itself
-- (its ID, the address the others reach it at, its last heartbeat), and each sandbox
-- records the replica that runs it (replica; empty: none yet, or it never started).

CREATE TABLE replicas (
    id           TEXT PRIMARY KEY,
    advertise    TEXT NOT NULL,
    started_at   INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL
) STRICT;

ALTER TABLE sandboxes ADD COLUMN replica TEXT NOT NULL DEFAULT '';

-- The apps hosts' sign-ins, shared by the replicas (a code minted by one is exchanged on
-- another): handoff codes and the app cookies they become, each by the SHA-256 of its
-- value, with the control-plane session sealed under a key derived from that value.
CREATE TABLE handoff_codes (
    key        TEXT PRIMARY KEY,
    user_id    TEXT NOT NULL,
    host       TEXT NOT NULL,
    sealed     BLOB NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;
CREATE INDEX handoff_codes_user ON handoff_codes (user_id, expires_at);

CREATE TABLE app_cookies (
    key        TEXT PRIMARY KEY,
    user_id    TEXT NOT NULL,
    host       TEXT NOT NULL,
    sealed     BLOB NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;
CREATE INDEX app_cookies_user ON app_cookies (user_id, expires_at);

-- WebSocket connection attempts per user, counted across replicas (the proxy's
-- reconnect-storm limit), and when each user's last storm was reported.
CREATE TABLE reconnect_attempts (
    user_id TEXT NOT NULL,
    at      INTEGER NOT NULL
) STRICT;
CREATE INDEX reconnect_attempts_user ON reconnect_attempts (user_id, at);

CREATE TABLE reconnect_storms (
    user_id     TEXT PRIMARY KEY,
    reported_at INTEGER NOT NULL
) STRICT;
