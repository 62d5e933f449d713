-- 0020: each user's choice for the coding agent in their sandboxes: the gateway provider
-- (by its name in the configuration) and the model. Either may be empty: the server's
-- default then applies.

CREATE TABLE agent_choices (
    user_id    TEXT    PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    provider   TEXT    NOT NULL,
    model      TEXT    NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;
