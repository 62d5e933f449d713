-- 0006: events are read by what they are about, too: a sandbox's timeline (its history's
-- events, recorded by the control plane as the sandbox's agent reports them) is listed by
-- target, in order, from a cursor.

CREATE INDEX audit_events_target ON audit_events (target, id);
