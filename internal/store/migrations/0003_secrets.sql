-- 0003: users' secrets, encrypted at rest (package secrets).
--
-- A value is stored only as AEAD ciphertext under one version of the secrets keyring,
-- whose keys live outside the database (a key file or an environment variable). Names,
-- versions and times are in the clear: they are what a listing shows.

-- secret_keys holds one row per key version the database has seen: a known text
-- encrypted under that version. Opening the secrets with a key that cannot decrypt it is
-- refused, so a wrong key never reads garbage or writes rows no right key can read.
CREATE TABLE secret_keys (
    version    INTEGER PRIMARY KEY CHECK (version > 0),
    nonce      BLOB    NOT NULL,
    check_ct   BLOB    NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

-- version counts the value's changes (1 on creation, +1 on every PUT) and is part of the
-- ciphertext's associated data with user_id and name: a ciphertext moved to another row,
-- or an older one pasted over a newer, does not decrypt. key_version says which key
-- encrypted it; the foreign key keeps every used version checkable.
CREATE TABLE secrets (
    user_id     TEXT    NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name        TEXT    NOT NULL,
    version     INTEGER NOT NULL CHECK (version > 0),
    key_version INTEGER NOT NULL REFERENCES secret_keys (version),
    nonce       BLOB    NOT NULL,
    ciphertext  BLOB    NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (user_id, name)
) STRICT;
CREATE INDEX secrets_key_version ON secrets (key_version);
