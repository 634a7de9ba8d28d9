-- Load per UTC minute and tenant: the same table and sums as 013_minute_load.sqlite.sql
-- (proxy/ledger/store/minutes.py explains them; postgres_minutes() is the SELECT below). As
-- the hourly rollup (002), PostgreSQL keeps it with a statement-level trigger over the rows
-- one INSERT added (none skipped by ON CONFLICT DO NOTHING), upserted in key order so
-- concurrent writers never deadlock.
CREATE TABLE minute_load (
    minute          BIGINT NOT NULL,   -- start / 60000000: UTC minutes since the epoch
    tenant          TEXT NOT NULL,
    busy_us         BIGINT NOT NULL,   -- microseconds of requests in flight in the minute
    prefill_mtokens BIGINT NOT NULL,   -- input-side tokens x 1000 prefilled in the minute
    decode_mtokens  BIGINT NOT NULL,   -- output tokens x 1000 decoded in the minute
    kv_token_ms     BIGINT NOT NULL,   -- KV tokens in flight integrated over the minute, token-milliseconds
    PRIMARY KEY (minute, tenant)
);

CREATE FUNCTION requests_minute_load() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO minute_load AS m (minute, tenant, busy_us, prefill_mtokens, decode_mtokens, kv_token_ms)
    SELECT minute, tenant,
           SUM(GREATEST(0, hi_e - lo_s)),
           SUM(CASE WHEN fw = 0 THEN CASE WHEN minute = m0 THEN i * 1000 ELSE 0 END
                    ELSE floor(1000::float8 * i * GREATEST(0, hi_f - lo_s) / fw + 0.5)::bigint END),
           SUM(CASE WHEN ow = 0 THEN CASE WHEN minute = m1 THEN o * 1000 ELSE 0 END
                    ELSE floor(1000::float8 * o * GREATEST(0, hi_e - lo_f) / ow + 0.5)::bigint END),
           SUM(floor((1::float8 * i * GREATEST(0, hi_e - lo_s)
                      + CASE WHEN ow > 0 AND hi_e > lo_f
                             THEN 1::float8 * o * ((1::float8 * (hi_e - f)) * (hi_e - f)
                                                   - (1::float8 * (lo_f - f)) * (lo_f - f)) / (2::float8 * ow)
                             ELSE 0 END) / 1000::float8 + 0.5)::bigint)
    FROM (
        SELECT g.minute, t.*,
               GREATEST(g.minute * 60000000, t.s) AS lo_s, GREATEST(g.minute * 60000000, t.f) AS lo_f,
               LEAST(g.minute * 60000000 + 60000000, t.e) AS hi_e,
               LEAST(g.minute * 60000000 + 60000000, t.f) AS hi_f
        FROM (
            SELECT tenant, s, s + d AS e, s + LEAST(ttft, d) AS f, LEAST(ttft, d) AS fw, d - LEAST(ttft, d) AS ow, i, o,
                   s / 60000000 AS m0, GREATEST(s, s + d - 1) / 60000000 AS m1
            FROM (
                SELECT tenant, start AS s, LEAST(GREATEST(duration_ms, 0), 86400000) * 1000 AS d,
                       CASE WHEN stream = 1 AND ttft_ms IS NOT NULL
                            THEN LEAST(GREATEST(ttft_ms, 0), 86400000) * 1000 ELSE 1000000 END AS ttft,
                       (input_tokens + cache_read_tokens + cache_write_tokens + cache_write_1h_tokens) AS i, output_tokens AS o
                FROM added WHERE endpoint IN ('chat', 'completions', 'embeddings', 'messages', 'responses') AND outcome != 'rejected') AS sized) AS t
        CROSS JOIN LATERAL generate_series(t.m0, t.m1) AS g(minute)) AS part
    GROUP BY 1, 2
    ORDER BY 1, 2
    ON CONFLICT (minute, tenant) DO UPDATE SET
        busy_us = m.busy_us + excluded.busy_us,
        prefill_mtokens = m.prefill_mtokens + excluded.prefill_mtokens,
        decode_mtokens = m.decode_mtokens + excluded.decode_mtokens,
        kv_token_ms = m.kv_token_ms + excluded.kv_token_ms;
    RETURN NULL;
END
$$;

CREATE TRIGGER requests_minute_load AFTER INSERT ON requests
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION requests_minute_load();

-- Ledgers written before this migration: their rows, spread once.
INSERT INTO minute_load (minute, tenant, busy_us, prefill_mtokens, decode_mtokens, kv_token_ms)
SELECT minute, tenant,
       SUM(GREATEST(0, hi_e - lo_s)),
       SUM(CASE WHEN fw = 0 THEN CASE WHEN minute = m0 THEN i * 1000 ELSE 0 END
                ELSE floor(1000::float8 * i * GREATEST(0, hi_f - lo_s) / fw + 0.5)::bigint END),
       SUM(CASE WHEN ow = 0 THEN CASE WHEN minute = m1 THEN o * 1000 ELSE 0 END
                ELSE floor(1000::float8 * o * GREATEST(0, hi_e - lo_f) / ow + 0.5)::bigint END),
       SUM(floor((1::float8 * i * GREATEST(0, hi_e - lo_s)
                  + CASE WHEN ow > 0 AND hi_e > lo_f
                         THEN 1::float8 * o * ((1::float8 * (hi_e - f)) * (hi_e - f)
                                               - (1::float8 * (lo_f - f)) * (lo_f - f)) / (2::float8 * ow)
                         ELSE 0 END) / 1000::float8 + 0.5)::bigint)
FROM (
    SELECT g.minute, t.*,
           GREATEST(g.minute * 60000000, t.s) AS lo_s, GREATEST(g.minute * 60000000, t.f) AS lo_f,
           LEAST(g.minute * 60000000 + 60000000, t.e) AS hi_e,
           LEAST(g.minute * 60000000 + 60000000, t.f) AS hi_f
    FROM (
        SELECT tenant, s, s + d AS e, s + LEAST(ttft, d) AS f, LEAST(ttft, d) AS fw, d - LEAST(ttft, d) AS ow, i, o,
               s / 60000000 AS m0, GREATEST(s, s + d - 1) / 60000000 AS m1
        FROM (
            SELECT tenant, start AS s, LEAST(GREATEST(duration_ms, 0), 86400000) * 1000 AS d,
                   CASE WHEN stream = 1 AND ttft_ms IS NOT NULL
                        THEN LEAST(GREATEST(ttft_ms, 0), 86400000) * 1000 ELSE 1000000 END AS ttft,
                   (input_tokens + cache_read_tokens + cache_write_tokens + cache_write_1h_tokens) AS i, output_tokens AS o
            FROM requests WHERE endpoint IN ('chat', 'completions', 'embeddings', 'messages', 'responses') AND outcome != 'rejected') AS sized) AS t
    CROSS JOIN LATERAL generate_series(t.m0, t.m1) AS g(minute)) AS part
GROUP BY 1, 2;
