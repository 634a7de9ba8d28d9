-- Load per UTC minute and tenant (proxy/ledger/store/minutes.py), for the report's
-- load_by_minute: time in flight, input-side tokens prefilled and output tokens decoded
-- (thousandths of a token) and KV token-milliseconds, as sums that add up across records.
-- The writer adds each batch's rows (SqliteWriter.insert_many), as it keeps the hourly rollup;
-- the statement below is SQLITE_ADD_MINUTES without its batch condition.
CREATE TABLE minute_load (
    minute          BIGINT NOT NULL,   -- start / 60000000: UTC minutes since the epoch
    tenant          TEXT NOT NULL,
    busy_us         BIGINT NOT NULL,   -- microseconds of requests in flight in the minute
    prefill_mtokens BIGINT NOT NULL,   -- input-side tokens x 1000 prefilled in the minute
    decode_mtokens  BIGINT NOT NULL,   -- output tokens x 1000 decoded in the minute
    kv_token_ms     BIGINT NOT NULL,   -- KV tokens in flight integrated over the minute, token-milliseconds
    PRIMARY KEY (minute, tenant)
);

-- Ledgers written before this migration: their rows, spread once.
WITH RECURSIVE sized AS (
    SELECT tenant, start AS s, MIN(MAX(duration_ms, 0), 86400000) * 1000 AS d,
           CASE WHEN stream = 1 AND ttft_ms IS NOT NULL THEN MIN(MAX(ttft_ms, 0), 86400000) * 1000
                ELSE 1000000 END AS ttft, (input_tokens + cache_read_tokens + cache_write_tokens + cache_write_1h_tokens) AS i, output_tokens AS o
    FROM requests WHERE endpoint IN ('chat', 'completions', 'embeddings', 'messages', 'responses') AND outcome != 'rejected'),
timed AS (
    SELECT tenant, s, s + d AS e, s + MIN(ttft, d) AS f, MIN(ttft, d) AS fw, d - MIN(ttft, d) AS ow, i, o,
           s / 60000000 AS m0, MAX(s, s + d - 1) / 60000000 AS m1
    FROM sized),
span AS (
    SELECT tenant, s, e, f, fw, ow, i, o, m0, m1, m0 AS minute FROM timed
    UNION ALL
    SELECT tenant, s, e, f, fw, ow, i, o, m0, m1, minute + 1 FROM span WHERE minute < m1),
part AS (
    SELECT minute, tenant, s, e, f, fw, ow, i, o, m0, m1,
           MAX(minute * 60000000, s) AS lo_s, MAX(minute * 60000000, f) AS lo_f,
           MIN(minute * 60000000 + 60000000, e) AS hi_e, MIN(minute * 60000000 + 60000000, f) AS hi_f
    FROM span)
INSERT INTO minute_load (minute, tenant, busy_us, prefill_mtokens, decode_mtokens, kv_token_ms)
SELECT minute, tenant,
       SUM(MAX(0, hi_e - lo_s)),
       SUM(CASE WHEN fw = 0 THEN CASE WHEN minute = m0 THEN i * 1000 ELSE 0 END
                ELSE CAST(1000.0 * i * MAX(0, hi_f - lo_s) / fw + 0.5 AS INTEGER) END),
       SUM(CASE WHEN ow = 0 THEN CASE WHEN minute = m1 THEN o * 1000 ELSE 0 END
                ELSE CAST(1000.0 * o * MAX(0, hi_e - lo_f) / ow + 0.5 AS INTEGER) END),
       SUM(CAST((1.0 * i * MAX(0, hi_e - lo_s)
                 + CASE WHEN ow > 0 AND hi_e > lo_f
                        THEN 1.0 * o * ((1.0 * (hi_e - f)) * (hi_e - f) - (1.0 * (lo_f - f)) * (lo_f - f)) / (2.0 * ow)
                        ELSE 0 END) / 1000.0 + 0.5 AS INTEGER))
FROM part WHERE true
GROUP BY minute, tenant
ON CONFLICT (minute, tenant) DO UPDATE SET
    busy_us = busy_us + excluded.busy_us,
    prefill_mtokens = prefill_mtokens + excluded.prefill_mtokens,
    decode_mtokens = decode_mtokens + excluded.decode_mtokens,
    kv_token_ms = kv_token_ms + excluded.kv_token_ms;
