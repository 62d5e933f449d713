-- 0013: packaged builds. An artifact's bytes are stored content-addressed under the data
-- directory (artifacts/sha256/HEX); a row says whose it is and what it is. The same bytes
-- packaged twice by one user are one artifact, its row brought up to date.

CREATE TABLE artifacts (
    user_id     TEXT    NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    sha256      TEXT    NOT NULL CHECK (length(sha256) = 64),
    sandbox_id  TEXT    NOT NULL,
    runtime     TEXT    NOT NULL,
    dir         TEXT    NOT NULL,
    size        INTEGER NOT NULL,
    sbom_sha256 TEXT    NOT NULL,
    manifest    TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (user_id, sha256)
) STRICT, WITHOUT ROWID;
CREATE INDEX artifacts_user_created ON artifacts (user_id, created_at);
