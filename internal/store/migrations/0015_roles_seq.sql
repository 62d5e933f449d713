-- 0015: replicas cache each user's roles, kept exact by notifications. Every change of
-- a user's roles takes the next roles_seq.seq and notifies it; each replica records the
-- last one it has applied (replicas.roles_seen), and the change is answered once every
-- live replica has.

CREATE TABLE roles_seq (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL
) STRICT;
INSERT INTO roles_seq (id, seq) VALUES (1, 0);

ALTER TABLE replicas ADD COLUMN roles_seen INTEGER NOT NULL DEFAULT 0;
