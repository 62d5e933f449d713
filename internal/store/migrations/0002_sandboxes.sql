-- 0002: the control plane's sandboxes and each user's two standing roles.
--
-- A row is the control plane's record of a sandbox: what was asked for and what state it
-- was last seen in. The running sandbox itself (container, VM) is the runner's; after a
-- restart the control plane re-adopts what still runs and marks the rest 'lost'.

CREATE TABLE sandboxes (
    id           TEXT    PRIMARY KEY,
    user_id      TEXT    NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         TEXT    NOT NULL,
    tier         TEXT    NOT NULL,
    runtime      TEXT    NOT NULL DEFAULT '',
    state        TEXT    NOT NULL CHECK (state IN ('creating', 'running', 'stopped', 'failed', 'lost')),
    error        TEXT    NOT NULL DEFAULT '',
    memory_bytes INTEGER NOT NULL DEFAULT 0,
    cpus         REAL    NOT NULL DEFAULT 0,
    pids         INTEGER NOT NULL DEFAULT 0,
    -- app is the template the sandbox runs: {"command": [...], "port": N, "build": "..."}.
    app          TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(app)),
    env          TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(env)),
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
) STRICT;
CREATE INDEX sandboxes_user ON sandboxes (user_id);
CREATE UNIQUE INDEX sandboxes_user_name ON sandboxes (user_id, name);

-- roles points each user's live and dev roles at one of their sandboxes. Promotion swaps
-- the two pointers in one UPDATE and counts it in generation. Deleting a sandbox clears
-- the pointer; the next use of the role makes a new one.
CREATE TABLE roles (
    user_id    TEXT    PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    live_id    TEXT    REFERENCES sandboxes (id) ON DELETE SET NULL,
    dev_id     TEXT    REFERENCES sandboxes (id) ON DELETE SET NULL,
    generation INTEGER NOT NULL DEFAULT 0,
    updated_at INTEGER NOT NULL,
    CHECK (live_id IS NULL OR dev_id IS NULL OR live_id <> dev_id)
) STRICT;
