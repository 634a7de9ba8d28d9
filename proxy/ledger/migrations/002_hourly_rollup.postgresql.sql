-- Hourly sums per attribution key, kept by a trigger as rows are inserted: the same table
-- and the same sums as 002_hourly_rollup.sqlite.sql, so reports read it alike on both.
-- PostgreSQL keeps it with a statement-level trigger: the rows one INSERT added (its
-- transition table, which holds no row skipped by ON CONFLICT DO NOTHING: no double count)
-- are summed per key and upserted once per key, in key order. Every writer takes the
-- rollup's row locks in that one order, so replicas inserting at once wait, never deadlock.
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

CREATE FUNCTION requests_hourly_rollup() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO hourly_rollup AS r
    SELECT start / 3600000000, COALESCE(model, model_requested, ''), (model IS NULL)::int,
           COALESCE(tier, ''), upstream, tenant, COALESCE(tag, ''), COALESCE(workload, ''),
           (endpoint IN ('chat', 'completions', 'embeddings', 'responses', 'messages'))::int,
           COUNT(*), SUM(input_tokens), SUM(cache_read_tokens), SUM(cache_write_tokens), SUM(output_tokens),
           COALESCE(SUM(reasoning_tokens), 0), COUNT(*) FILTER (WHERE usage_source = 'estimated'),
           COUNT(*) FILTER (WHERE cost_units IS NULL AND outcome != 'rejected'
                            AND endpoint IN ('chat', 'completions', 'embeddings', 'responses', 'messages')),
           COALESCE(SUM(cost_units), 0)
    FROM added
    GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9
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
        cost_units = r.cost_units + excluded.cost_units;
    RETURN NULL;
END
$$;

CREATE TRIGGER requests_hourly_rollup AFTER INSERT ON requests
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION requests_hourly_rollup();

-- Ledgers written before this migration: their rows, summed once.
INSERT INTO hourly_rollup
SELECT start / 3600000000, COALESCE(model, model_requested, ''), (model IS NULL)::int, COALESCE(tier, ''), upstream,
       tenant, COALESCE(tag, ''), COALESCE(workload, ''),
       (endpoint IN ('chat', 'completions', 'embeddings', 'responses', 'messages'))::int,
       COUNT(*), SUM(input_tokens), SUM(cache_read_tokens), SUM(cache_write_tokens), SUM(output_tokens),
       COALESCE(SUM(reasoning_tokens), 0), COUNT(*) FILTER (WHERE usage_source = 'estimated'),
       COUNT(*) FILTER (WHERE cost_units IS NULL AND outcome != 'rejected'
                        AND endpoint IN ('chat', 'completions', 'embeddings', 'responses', 'messages')),
       COALESCE(SUM(cost_units), 0)
FROM requests
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9;
