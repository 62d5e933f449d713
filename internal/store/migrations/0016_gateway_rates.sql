-- 0016: the gateway's request buckets per user and provider, shared by the replicas (a
-- user's requests count against one rate whichever replica's sandboxes send them):
-- tokens in millionths of a request, last when the bucket was last refilled.

CREATE TABLE gateway_rates (
    user_id  TEXT NOT NULL,
    provider TEXT NOT NULL,
    tokens   INTEGER NOT NULL,
    last_at  INTEGER NOT NULL,
    PRIMARY KEY (user_id, provider)
) STRICT;
