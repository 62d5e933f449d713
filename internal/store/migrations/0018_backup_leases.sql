-- 0018: leases on the backup bucket, shared by the replicas: one per sandbox whose backup
-- is under way (name: its ID), and one for the retention pass (name: retention). A pass
-- runs on one replica at a time; a backup waits while one runs, and a pass sweeps no blob
-- while a backup is under way. holder is the replica's ID and a random suffix; a lease
-- not renewed by expires_at lapses, so a replica that died frees what it held.

CREATE TABLE backup_leases (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;
