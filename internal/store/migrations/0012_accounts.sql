-- 0011: token expiry and scopes, and registration invites.
--
-- Tokens made before this migration had no expiry and could do anything their user could.
-- They keep what they could do (read, write and tokens; admin too for an admin's) and
-- expire 30 days after the upgrade, so that a token nobody uses any more goes away by
-- itself while the CLI keeps working until its user signs in again.

ALTER TABLE api_tokens ADD COLUMN expires_at INTEGER;
ALTER TABLE api_tokens ADD COLUMN scopes TEXT NOT NULL DEFAULT '';

UPDATE api_tokens SET
    expires_at = (unixepoch() + 30 * 86400) * 1000000000,
    scopes = CASE WHEN (SELECT role FROM users WHERE users.id = api_tokens.user_id) = 'admin'
        THEN 'read write tokens admin' ELSE 'read write tokens' END;

CREATE TABLE invites (
    id         TEXT    PRIMARY KEY,
    code_hash  BLOB    NOT NULL UNIQUE CHECK (length(code_hash) = 32),
    prefix     TEXT    NOT NULL,
    created_by TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    max_uses   INTEGER NOT NULL CHECK (max_uses > 0),
    uses       INTEGER NOT NULL DEFAULT 0,
    revoked_at INTEGER
) STRICT;
