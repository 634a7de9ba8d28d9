-- Money that cannot overflow (proxy/ledger/store.py explains the bounds); the same columns
-- as 005_wide_money.sqlite.sql. A record at the caps costs up to 4 x 10^19 units, beyond
-- BIGINT: requests keep the cost modulo 10^18 in cost_units and the rest in cost_carry. The
-- rollup keeps whole dollars in cost_usd and the units below a dollar in cost_units.
-- PostgreSQL's BIGINT arithmetic raises on overflow rather than round, so no rollup here
-- was ever inexact: the existing sums are split in place.
ALTER TABLE requests ADD COLUMN cost_carry BIGINT NOT NULL DEFAULT 0;
ALTER TABLE hourly_rollup ADD COLUMN cost_usd BIGINT NOT NULL DEFAULT 0;
UPDATE hourly_rollup SET cost_usd = cost_units / 10000000000, cost_units = cost_units % 10000000000;

-- 002's trigger function, summing money in the two parts: each batch's sums fit in BIGINT,
-- and the rollup's units are carried into dollars as they pass 10^10.
CREATE OR REPLACE FUNCTION requests_hourly_rollup() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO hourly_rollup AS r (hour, model, unpriced_model, tier, upstream, tenant, tag, workload, metered,
                                    requests, input_tokens, cache_read_tokens, cache_write_tokens, output_tokens,
                                    reasoning_tokens, estimated, unpriced, cost_usd, cost_units)
    SELECT hour, model, unpriced_model, tier, upstream, tenant, tag, workload, metered, requests,
           input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, reasoning_tokens, estimated, unpriced,
           usd + rest / 10000000000, rest % 10000000000
    FROM (
        SELECT start / 3600000000 AS hour, COALESCE(model, model_requested, '') AS model,
               (model IS NULL)::int AS unpriced_model, COALESCE(tier, '') AS tier, upstream, tenant,
               COALESCE(tag, '') AS tag, COALESCE(workload, '') AS workload,
               (endpoint IN ('chat', 'completions', 'embeddings', 'responses', 'messages'))::int AS metered,
               COUNT(*) AS requests, SUM(input_tokens) AS input_tokens, SUM(cache_read_tokens) AS cache_read_tokens,
               SUM(cache_write_tokens) AS cache_write_tokens, SUM(output_tokens) AS output_tokens,
               COALESCE(SUM(reasoning_tokens), 0) AS reasoning_tokens,
               COUNT(*) FILTER (WHERE usage_source = 'estimated') AS estimated,
               COUNT(*) FILTER (WHERE cost_units IS NULL AND outcome != 'rejected'
                                AND endpoint IN ('chat', 'completions', 'embeddings', 'responses', 'messages'))
                   AS unpriced,
               COALESCE(SUM(cost_units / 10000000000 + cost_carry * 100000000), 0)::bigint AS usd,
               COALESCE(SUM(cost_units % 10000000000), 0)::bigint AS rest
        FROM added
        GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9) AS batch
    ORDER BY 1, 2, 3, 4, 5, 6, 7, 8, 9
    ON CONFLICT (hour, model, unpriced_model, tier, upstream, tenant, tag, workload, metered) DO UPDATE SET
        requests = r.requests + excluded.requests,
        input_tokens = r.input_tokens + excluded.input_tokens,
        cache_read_tokens = r.cache_read_tokens + excluded.cache_read_tokens,
        cache_write_tokens = r.cache_write_tokens + excluded.cache_write_tokens,
        output_tokens = r.output_tokens + excluded.output_tokens,
        reasoning_tokens = r.reasoning_tokens + excluded.reasoning_tokens,
        estimated = r.estimated + excluded.estimated,
        unpriced = r.unpriced + excluded.unpriced,
        cost_usd = r.cost_usd + excluded.cost_usd + (r.cost_units + excluded.cost_units) / 10000000000,
        cost_units = (r.cost_units + excluded.cost_units) % 10000000000;
    RETURN NULL;
END
$$;
