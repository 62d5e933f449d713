-- 0010: drop the index of audit events by time alone. No query reads it (events are listed
-- by actor, action or target, in id order, which follows time), and every event written
-- paid for it: one more B-tree page in the WAL of each commit, on the broker's path too,
-- where each grant's audit event is committed before the sandbox hears of it.

DROP INDEX IF EXISTS audit_events_at;
