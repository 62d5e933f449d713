-- 0005: the policy attached to one sandbox (package policy's YAML, as the user sent it).
-- The text is stored, not a compiled form: the control plane loads it again when it needs
-- it, so a newer paddock reads an older policy with its own rules. Only a policy that
-- loaded is ever stored: a sandbox keeps its last good one when a new one fails. Deleting
-- the sandbox deletes its policy.

CREATE TABLE sandbox_policies (
    sandbox_id TEXT    PRIMARY KEY REFERENCES sandboxes (id) ON DELETE CASCADE,
    policy     TEXT    NOT NULL,
    updated_by TEXT    NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;
