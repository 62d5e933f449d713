-- 0017: the replica whose data directory holds an artifact's bytes ('' without replicas);
-- the others forward its downloads there.

ALTER TABLE artifacts ADD COLUMN replica TEXT NOT NULL DEFAULT '';
