-- Money that cannot overflow or turn into a float (proxy/ledger/store.py explains the bounds).
-- A record at the caps costs up to 4 x 10^19 units, beyond BIGINT: requests keep the cost
-- modulo 10^18 in cost_units (the whole cost below $100M) and the rest in cost_carry.
-- The rollup keeps whole dollars in cost_usd and the units below a dollar in cost_units,
-- so no addition in it can overflow; SQLite's `+` would silently make a REAL of one that
-- did, so cost_usd refuses anything but an integer (the batch is then refused, not rounded).
ALTER TABLE requests ADD COLUMN cost_carry BIGINT NOT NULL DEFAULT 0;
ALTER TABLE hourly_rollup ADD COLUMN cost_usd BIGINT NOT NULL DEFAULT 0 CHECK (typeof(cost_usd) = 'integer');

-- Hours whose sum already overflowed into a REAL (before this migration) are summed again
-- from their requests, exactly; the others are split in place.
CREATE TEMP TABLE llmmeter_inexact_hours AS
    SELECT DISTINCT hour FROM hourly_rollup WHERE typeof(cost_units) != 'integer';
DELETE FROM hourly_rollup WHERE hour IN (SELECT hour FROM llmmeter_inexact_hours);
UPDATE hourly_rollup SET cost_usd = cost_units / 10000000000, cost_units = cost_units % 10000000000;
INSERT INTO hourly_rollup (hour, model, unpriced_model, tier, upstream, tenant, tag, workload, metered, requests,
                           input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, reasoning_tokens,
                           estimated, unpriced, cost_usd, cost_units)
SELECT hour, model, unpriced_model, tier, upstream, tenant, tag, workload, metered, requests,
       input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, reasoning_tokens,
       estimated, unpriced, usd + rest / 10000000000, rest % 10000000000
FROM (
    SELECT start / 3600000000 AS hour, COALESCE(model, model_requested, '') AS model,
           CASE WHEN model IS NULL THEN 1 ELSE 0 END AS unpriced_model, COALESCE(tier, '') AS tier, upstream, tenant,
           COALESCE(tag, '') AS tag, COALESCE(workload, '') AS workload,
           CASE WHEN endpoint IN ('chat', 'completions', 'embeddings', 'responses', 'messages') THEN 1 ELSE 0 END
               AS metered,
           COUNT(*) AS requests, SUM(input_tokens) AS input_tokens, SUM(cache_read_tokens) AS cache_read_tokens,
           SUM(cache_write_tokens) AS cache_write_tokens, SUM(output_tokens) AS output_tokens,
           COALESCE(SUM(reasoning_tokens), 0) AS reasoning_tokens,
           SUM(CASE WHEN usage_source = 'estimated' THEN 1 ELSE 0 END) AS estimated,
           SUM(CASE WHEN cost_units IS NULL AND outcome != 'rejected'
                    AND endpoint IN ('chat', 'completions', 'embeddings', 'responses', 'messages') THEN 1 ELSE 0 END)
               AS unpriced,
           COALESCE(SUM(cost_units / 10000000000), 0) AS usd, COALESCE(SUM(cost_units % 10000000000), 0) AS rest
    FROM requests WHERE start / 3600000000 IN (SELECT hour FROM llmmeter_inexact_hours)
    GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9) AS summed
WHERE true;
DROP TABLE llmmeter_inexact_hours;
