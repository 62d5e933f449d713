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
