-- SPEC "Version 4 additions": refusals before a key is known are written as one record per
-- minute and reason (flag `aggregated`), which stands for every refusal it counts. Every
-- other record, and every row written before this migration, stands for one request.
-- SQLite's rollup is summed per batch by the writer (proxy/ledger/store/sql.py, HOURLY_SQL),
-- which adds request_count from now on; nothing else changes here.
ALTER TABLE requests ADD COLUMN request_count BIGINT NOT NULL DEFAULT 1;
