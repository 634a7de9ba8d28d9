-- The unpriced and estimated requests' own sums (proxy/ledger/store/uncertain.py), per UTC
-- hour, tenant, model, tier, upstream and which of the two they are, for the report's
-- `unpriced_estimated` section: it read them from the requests, a random read of nearly every
-- page of a month's table. Money in whole dollars and the units below one, summed apart.
CREATE TABLE uncertain_rollup (
    hour                  BIGINT NOT NULL,
    tenant                TEXT NOT NULL,
    model                 TEXT NOT NULL,
    unpriced_model        SMALLINT NOT NULL,
    tier                  TEXT NOT NULL,
    upstream              TEXT NOT NULL,
    unpriced              SMALLINT NOT NULL,
    estimated             SMALLINT NOT NULL,
    requests              BIGINT NOT NULL,
    input_tokens          BIGINT NOT NULL,
    cache_read_tokens     BIGINT NOT NULL,
    cache_write_tokens    BIGINT NOT NULL,
    cache_write_1h_tokens BIGINT NOT NULL,
    output_tokens         BIGINT NOT NULL,
    web_search_calls      BIGINT NOT NULL,
    cost_usd              BIGINT NOT NULL,
    cost_rest             BIGINT NOT NULL,  -- units below a dollar, summed: not carried into cost_usd
    PRIMARY KEY (hour, tenant, model, unpriced_model, tier, upstream, unpriced, estimated)
) WITHOUT ROWID;

-- A month pruned before this migration lost rows these sums never held (as with 015's histograms).
UPDATE pruned_months SET before_histograms = 1;
-- The writer adds each batch's rows (SqliteWriter.insert_many).

-- Ledgers written before this migration: their rows, summed once.
INSERT INTO uncertain_rollup (hour, tenant, model, unpriced_model, tier, upstream, unpriced, estimated, requests, input_tokens, cache_read_tokens, cache_write_tokens, cache_write_1h_tokens, output_tokens, web_search_calls, cost_usd, cost_rest) SELECT hour, tenant, model, unpriced_model, tier, upstream, unpriced, estimated, COUNT(*), SUM(input_tokens), SUM(cache_read_tokens), SUM(cache_write_tokens), SUM(cache_write_1h_tokens), SUM(output_tokens), SUM(web_search_calls), SUM(cost_usd), SUM(cost_rest) FROM (SELECT start / 3600000000 AS hour, tenant, COALESCE(model, model_requested, '') AS model, CASE WHEN model IS NULL THEN 1 ELSE 0 END AS unpriced_model, COALESCE(tier, '') AS tier, upstream, CASE WHEN (cost_units IS NULL AND outcome != 'rejected' AND endpoint IN ('batch', 'chat', 'completions', 'embeddings', 'messages', 'responses')) THEN 1 ELSE 0 END AS unpriced, CASE WHEN (usage_source = 'estimated') THEN 1 ELSE 0 END AS estimated, input_tokens, cache_read_tokens, cache_write_tokens, cache_write_1h_tokens, output_tokens, web_search_calls, COALESCE((cost_units / 10000000000 + cost_carry * 100000000), 0) AS cost_usd, COALESCE((cost_units - cost_units / 10000000000 * 10000000000), 0) AS cost_rest FROM requests WHERE true AND ((cost_units IS NULL AND outcome != 'rejected' AND endpoint IN ('batch', 'chat', 'completions', 'embeddings', 'messages', 'responses')) OR (usage_source = 'estimated'))) AS v WHERE true GROUP BY 1, 2, 3, 4, 5, 6, 7, 8 ORDER BY 1, 2, 3, 4, 5, 6, 7, 8 ON CONFLICT (hour, tenant, model, unpriced_model, tier, upstream, unpriced, estimated) DO UPDATE SET requests = uncertain_rollup.requests + excluded.requests, input_tokens = uncertain_rollup.input_tokens + excluded.input_tokens, cache_read_tokens = uncertain_rollup.cache_read_tokens + excluded.cache_read_tokens, cache_write_tokens = uncertain_rollup.cache_write_tokens + excluded.cache_write_tokens, cache_write_1h_tokens = uncertain_rollup.cache_write_1h_tokens + excluded.cache_write_1h_tokens, output_tokens = uncertain_rollup.output_tokens + excluded.output_tokens, web_search_calls = uncertain_rollup.web_search_calls + excluded.web_search_calls, cost_usd = uncertain_rollup.cost_usd + excluded.cost_usd, cost_rest = uncertain_rollup.cost_rest + excluded.cost_rest;
