-- 0019: leases on the backup bucket, shared by the replicas: one per sandbox whose backup
-- is under way (name: its ID), and one for the retention pass (name: retention). A pass
-- runs on one replica at a time; a backup waits while one runs, and a pass sweeps no blob
-- while a backup is under way. holder is the replica's ID and a random suffix; a lease
-- not renewed by expires_at lapses, so a replica that died frees what it held.

CREATE TABLE backup_leases (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;

-- Values of the server's own (not a user's) that every replica needs, such as the CA of
-- the sandboxes' channel on a cluster: sealed under the secrets keyring as a user's
-- secret is (key_version names the key; the name is in the associated data), made by
-- the first replica that needs one and read by the others.
CREATE TABLE sealed_values (
    name        TEXT    PRIMARY KEY,
    key_version INTEGER NOT NULL REFERENCES secret_keys (version),
    nonce       BLOB    NOT NULL,
    ciphertext  BLOB    NOT NULL,
    created_at  INTEGER NOT NULL
) STRICT;
