-- 0008: a sandbox's disk limits, recorded like its memory (from the create request or its
-- policy's resources) and applied from its next start: the size of its /tmp, a tmpfs
-- (tmp_bytes), and the largest file its commands may write, RLIMIT_FSIZE (file_size_bytes).
-- 0 is not set: the runner's default applies.

ALTER TABLE sandboxes ADD COLUMN tmp_bytes       INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN file_size_bytes INTEGER NOT NULL DEFAULT 0;
