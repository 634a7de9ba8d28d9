-- Version 2 of the record (SPEC "Usage extraction", "Price tables, version 2"): 1-hour cache
-- writes, per-call fees, the long-context band a request was priced at, and the cost the
-- provider itself reported. Existing rows read as 0 (tokens, calls) or NULL (not known).
-- fee_units is a subset of the cost (at most 10^18 units a record); provider_cost_units is
-- refused above 10^18 units by the usage reader.
ALTER TABLE requests ADD COLUMN cache_write_1h_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE requests ADD COLUMN web_search_calls BIGINT NOT NULL DEFAULT 0;
ALTER TABLE requests ADD COLUMN price_band BIGINT;
ALTER TABLE requests ADD COLUMN fee_units BIGINT;
ALTER TABLE requests ADD COLUMN provider_cost_units BIGINT;

-- The hourly rollup keeps the same: 1-hour cache writes, web search calls, fees and the
-- provider's cost (money in two parts as in 005: whole dollars, and the units below one),
-- the records that had a provider cost, and the band joins the key (an unpriced record and
-- every row written before this migration count at band 0). The same columns, in the same
-- order, as 007_bill_exact.sqlite.sql.
ALTER TABLE hourly_rollup
    ADD COLUMN price_band BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN cache_write_1h_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN web_search_calls BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN fee_usd BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN fee_units BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN provider_cost_usd BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN provider_cost_units BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN provider_costed BIGINT NOT NULL DEFAULT 0;
ALTER TABLE hourly_rollup DROP CONSTRAINT hourly_rollup_pkey;
ALTER TABLE hourly_rollup
    ADD PRIMARY KEY (hour, model, unpriced_model, tier, upstream, tenant, tag, workload, metered, price_band);

-- 005's trigger function with the new sums and key; as ever in key order, so concurrent
-- writers take the rollup's row locks in one order and never deadlock.
CREATE OR REPLACE FUNCTION requests_hourly_rollup() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO hourly_rollup AS r (hour, model, unpriced_model, tier, upstream, tenant, tag, workload, metered,
                                    price_band, requests, input_tokens, cache_read_tokens, cache_write_tokens,
                                    output_tokens, reasoning_tokens, estimated, unpriced, cost_usd, cost_units,
                                    cache_write_1h_tokens, web_search_calls, fee_usd, fee_units,
                                    provider_cost_usd, provider_cost_units, provider_costed)
    SELECT hour, model, unpriced_model, tier, upstream, tenant, tag, workload, metered, price_band, requests,
           input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, reasoning_tokens, estimated, unpriced,
           usd + rest / 10000000000, rest % 10000000000,
           cache_write_1h_tokens, web_search_calls,
           fee_usd + fee_rest / 10000000000, fee_rest % 10000000000,
           provider_usd + provider_rest / 10000000000, provider_rest % 10000000000, provider_costed
    FROM (
        SELECT start / 3600000000 AS hour, COALESCE(model, model_requested, '') AS model,
               (model IS NULL)::int AS unpriced_model, COALESCE(tier, '') AS tier, upstream, tenant,
               COALESCE(tag, '') AS tag, COALESCE(workload, '') AS workload,
               (endpoint IN ('batch', 'chat', 'completions', 'embeddings', 'messages', 'responses'))::int AS metered,
               COALESCE(price_band, 0) AS price_band,
               COUNT(*) AS requests, SUM(input_tokens) AS input_tokens, SUM(cache_read_tokens) AS cache_read_tokens,
               SUM(cache_write_tokens) AS cache_write_tokens, SUM(output_tokens) AS output_tokens,
               COALESCE(SUM(reasoning_tokens), 0) AS reasoning_tokens,
               COUNT(*) FILTER (WHERE usage_source = 'estimated') AS estimated,
               COUNT(*) FILTER (WHERE cost_units IS NULL AND outcome != 'rejected'
                                AND endpoint IN ('batch', 'chat', 'completions', 'embeddings', 'messages', 'responses'))
                   AS unpriced,
               COALESCE(SUM(cost_units / 10000000000 + cost_carry * 100000000), 0)::bigint AS usd,
               COALESCE(SUM(cost_units % 10000000000), 0)::bigint AS rest,
               SUM(cache_write_1h_tokens) AS cache_write_1h_tokens, SUM(web_search_calls) AS web_search_calls,
               COALESCE(SUM(fee_units / 10000000000), 0)::bigint AS fee_usd,
               COALESCE(SUM(fee_units % 10000000000), 0)::bigint AS fee_rest,
               COALESCE(SUM(provider_cost_units / 10000000000), 0)::bigint AS provider_usd,
               COALESCE(SUM(provider_cost_units % 10000000000), 0)::bigint AS provider_rest,
               COUNT(provider_cost_units) AS provider_costed
        FROM added
        GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9, 10) AS batch
    ORDER BY 1, 2, 3, 4, 5, 6, 7, 8, 9, 10
    ON CONFLICT (hour, model, unpriced_model, tier, upstream, tenant, tag, workload, metered, price_band) DO UPDATE SET
        requests = r.requests + excluded.requests,
        input_tokens = r.input_tokens + excluded.input_tokens,
        cache_read_tokens = r.cache_read_tokens + excluded.cache_read_tokens,
        cache_write_tokens = r.cache_write_tokens + excluded.cache_write_tokens,
        output_tokens = r.output_tokens + excluded.output_tokens,
        reasoning_tokens = r.reasoning_tokens + excluded.reasoning_tokens,
        estimated = r.estimated + excluded.estimated,
        unpriced = r.unpriced + excluded.unpriced,
        cost_usd = r.cost_usd + excluded.cost_usd + (r.cost_units + excluded.cost_units) / 10000000000,
        cost_units = (r.cost_units + excluded.cost_units) % 10000000000,
        cache_write_1h_tokens = r.cache_write_1h_tokens + excluded.cache_write_1h_tokens,
        web_search_calls = r.web_search_calls + excluded.web_search_calls,
        fee_usd = r.fee_usd + excluded.fee_usd + (r.fee_units + excluded.fee_units) / 10000000000,
        fee_units = (r.fee_units + excluded.fee_units) % 10000000000,
        provider_cost_usd = r.provider_cost_usd + excluded.provider_cost_usd
                            + (r.provider_cost_units + excluded.provider_cost_units) / 10000000000,
        provider_cost_units = (r.provider_cost_units + excluded.provider_cost_units) % 10000000000,
        provider_costed = r.provider_costed + excluded.provider_costed;
    RETURN NULL;
END
$$;

-- 003's histogram trigger: the input side counts 1-hour cache writes (rows before this
-- migration had none, so their buckets stand).
CREATE OR REPLACE FUNCTION requests_input_side_histogram() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO input_side_histogram AS h
    SELECT a.start / 3600000000, a.tenant,
           (SELECT MAX(lo) FROM input_side_bounds WHERE lo <= a.input_tokens + a.cache_read_tokens
                                                          + a.cache_write_tokens + a.cache_write_1h_tokens), COUNT(*)
    FROM added a WHERE a.endpoint IN ('batch', 'chat', 'completions', 'embeddings', 'messages', 'responses')
    GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
    ON CONFLICT (hour, tenant, bucket) DO UPDATE SET requests = h.requests + excluded.requests;
    RETURN NULL;
END
$$;
