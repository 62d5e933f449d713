-- 0004: the secrets broker's leases. A lease records that a sandbox was given the value of
-- one of its user's secrets for a capability, until expires_at. It holds no value: only
-- which secret (by name) and to whom. Stopping a sandbox revokes its leases, and a revoked
-- or expired lease is never renewed.

CREATE TABLE leases (
    id            TEXT    PRIMARY KEY,
    user_id       TEXT    NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    sandbox_id    TEXT    NOT NULL,
    capability    TEXT    NOT NULL,
    secret_name   TEXT    NOT NULL,
    issued_at     INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL,
    revoked_at    INTEGER NOT NULL DEFAULT 0,
    revoke_reason TEXT    NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX leases_sandbox ON leases (sandbox_id) WHERE revoked_at = 0;
