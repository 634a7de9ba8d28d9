-- SPEC "Version 4 additions": refusals before a key is known are written as one record per
-- minute and reason (flag `aggregated`), which stands for every refusal it counts. Every
-- other record, and every row written before this migration, stands for one request.
ALTER TABLE requests ADD COLUMN request_count BIGINT NOT NULL DEFAULT 1;

-- 007's trigger function, with each row counting as the requests it stands for. (The
-- input-side histogram counts metered endpoints only, where no record is aggregated.)
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
               SUM(request_count) AS requests, SUM(input_tokens) AS input_tokens, SUM(cache_read_tokens) AS cache_read_tokens,
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
