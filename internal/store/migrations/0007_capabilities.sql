-- 0007: capability tokens the control plane minted (package capability). The token itself
-- is never stored — it is a bearer credential, shown once — only what it grants, to whom,
-- until when, and whether it was revoked. Verifying a token asks for its row: a token
-- whose row is missing (minted by no one this database knows, or its sandbox deleted) is
-- refused. Deleting the sandbox deletes its tokens' rows.

CREATE TABLE capabilities (
    id          TEXT    PRIMARY KEY,
    sandbox_id  TEXT    NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
    minted_by   TEXT    NOT NULL,
    resource    TEXT    NOT NULL,
    actions     TEXT    NOT NULL,
    expires_at  INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX capabilities_sandbox ON capabilities (sandbox_id, created_at);
