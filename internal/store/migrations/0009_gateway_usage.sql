-- 0009: the provider gateway's token ledger: how many tokens each user has spent on each
-- provider on each UTC day, so that daily budgets (tokens_per_day) hold across restarts
-- of the control plane. day is the day's UTC midnight in Unix seconds. Rows of past days
-- are not needed by the budget and may be pruned; the gateway.usage events keep the
-- detail.

CREATE TABLE gateway_usage (
    user_id  TEXT    NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    provider TEXT    NOT NULL,
    day      INTEGER NOT NULL,
    tokens   INTEGER NOT NULL,
    PRIMARY KEY (user_id, provider, day)
) STRICT, WITHOUT ROWID;
