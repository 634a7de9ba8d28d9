-- Hourly sums per attribution key, kept by a trigger as rows are inserted, so a monthly
-- report reads a few thousand rollup rows instead of scanning every request. An insert
-- that is ignored as a duplicate (ON CONFLICT DO NOTHING) fires no trigger: no double count.
CREATE TABLE hourly_rollup (
    hour               BIGINT NOT NULL,   -- start / 3600000000: UTC hours since the epoch
    model              TEXT NOT NULL,     -- canonical model, else the requested name, else ''
    unpriced_model     SMALLINT NOT NULL,
    tier               TEXT NOT NULL,
    upstream           TEXT NOT NULL,
    tenant             TEXT NOT NULL,
    tag                TEXT NOT NULL,
    workload           TEXT NOT NULL,
    metered            SMALLINT NOT NULL,
    requests           BIGINT NOT NULL,
    input_tokens       BIGINT NOT NULL,
    cache_read_tokens  BIGINT NOT NULL,
    cache_write_tokens BIGINT NOT NULL,
    output_tokens      BIGINT NOT NULL,
    reasoning_tokens   BIGINT NOT NULL,
    estimated          BIGINT NOT NULL,
    unpriced           BIGINT NOT NULL,
    cost_units         BIGINT NOT NULL,
    PRIMARY KEY (hour, model, unpriced_model, tier, upstream, tenant, tag, workload, metered)
);

CREATE TRIGGER requests_hourly_rollup AFTER INSERT ON requests
BEGIN
    INSERT INTO hourly_rollup VALUES (
        NEW.start / 3600000000,
        COALESCE(NEW.model, NEW.model_requested, ''), NEW.model IS NULL,
        COALESCE(NEW.tier, ''), NEW.upstream, NEW.tenant, COALESCE(NEW.tag, ''), COALESCE(NEW.workload, ''),
        NEW.endpoint IN ('chat', 'completions', 'embeddings', 'responses', 'messages'),
        1, NEW.input_tokens, NEW.cache_read_tokens, NEW.cache_write_tokens, NEW.output_tokens,
        COALESCE(NEW.reasoning_tokens, 0), NEW.usage_source = 'estimated',
        NEW.cost_units IS NULL AND NEW.outcome != 'rejected'
            AND NEW.endpoint IN ('chat', 'completions', 'embeddings', 'responses', 'messages'),
        COALESCE(NEW.cost_units, 0))
    ON CONFLICT (hour, model, unpriced_model, tier, upstream, tenant, tag, workload, metered) DO UPDATE SET
        requests = requests + excluded.requests,
        input_tokens = input_tokens + excluded.input_tokens,
        cache_read_tokens = cache_read_tokens + excluded.cache_read_tokens,
        cache_write_tokens = cache_write_tokens + excluded.cache_write_tokens,
        output_tokens = output_tokens + excluded.output_tokens,
        reasoning_tokens = reasoning_tokens + excluded.reasoning_tokens,
        estimated = estimated + excluded.estimated,
        unpriced = unpriced + excluded.unpriced,
        cost_units = cost_units + excluded.cost_units;
END;

-- Ledgers written before this migration: their rows, summed once.
INSERT INTO hourly_rollup
SELECT start / 3600000000, COALESCE(model, model_requested, ''), model IS NULL, COALESCE(tier, ''), upstream,
       tenant, COALESCE(tag, ''), COALESCE(workload, ''),
       endpoint IN ('chat', 'completions', 'embeddings', 'responses', 'messages'),
       COUNT(*), SUM(input_tokens), SUM(cache_read_tokens), SUM(cache_write_tokens), SUM(output_tokens),
       COALESCE(SUM(reasoning_tokens), 0), SUM(usage_source = 'estimated'),
       SUM(cost_units IS NULL AND outcome != 'rejected'
           AND endpoint IN ('chat', 'completions', 'embeddings', 'responses', 'messages')),
       COALESCE(SUM(cost_units), 0)
FROM requests WHERE true
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9;
