-- 0018: an artifact's copy in the backup store: '' (no store), pending, retrying, stored
-- or failed, and the last upload's error.

ALTER TABLE artifacts ADD COLUMN bucket TEXT NOT NULL DEFAULT '';
ALTER TABLE artifacts ADD COLUMN bucket_error TEXT NOT NULL DEFAULT '';
