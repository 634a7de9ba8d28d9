-- Retention (SPEC "Version 4 additions", proxy/ledger/retention.py): the UTC months whose
-- per-request rows `llmmeter ledger prune` deleted. Their hourly rollups stay; the report
-- reads this table to say which of its figures need the rows that are gone.
CREATE TABLE pruned_months (
    month     TEXT PRIMARY KEY,  -- YYYY-MM, a UTC month
    pruned_at BIGINT NOT NULL,   -- when rows of it were last deleted, UTC microseconds since the epoch
    requests  BIGINT NOT NULL    -- rows deleted, over every prune of the month
);
