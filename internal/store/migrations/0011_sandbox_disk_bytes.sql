-- 0011: a sandbox's disk limit, recorded like its memory (from the create request or its
-- policy's resources) and applied from its next start: the size of the file system image
-- that holds its workspace and /tmp (disk_bytes). 0 is not set: the runner's default applies.

ALTER TABLE sandboxes ADD COLUMN disk_bytes INTEGER NOT NULL DEFAULT 0;
