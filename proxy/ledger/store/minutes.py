"""The per-minute load table (migration 013) that the report's `load_by_minute` reads.

Each metered request adds, to every UTC minute it overlaps, sums that combine by addition:
the microseconds it was in flight in that minute, the input-side tokens prefilled in it
(spread evenly over its time to first token; a request not streamed: over its first second),
the output tokens decoded in it (spread evenly from the first token to its end), and its
KV token-milliseconds (input side plus output produced so far, integrated over the minute).
Token amounts are kept in thousandths of a token and each record's share of a minute is
rounded once to that unit, so every minute is a sum of integers and reads the same
whatever order records arrived in. A request is counted over at most its first day
(MAX_SPAN_MS), so one record touches at most 1,441 minutes.

SQLite keeps the table from the writer, per batch (SqliteWriter.insert_many, as it keeps the
hourly rollup); PostgreSQL from a statement-level trigger. Both forms of the SQL below are
also in the migration files, which fill the table from the rows a ledger already has.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.ledger.store.sql import INPUT_SIDE
from proxy.protocol.names import METERED

MINUTE_US = 60_000_000
MAX_SPAN_MS = 86_400_000  # one day: requests run for minutes; a day bounds the work a record costs
MILLI = 1000  # prefill and decode are kept in thousandths of a token
# Requests served as they came; batch results ran whenever the provider chose (not live load).
LIVE_SQL = ", ".join(f"'{endpoint}'" for endpoint in sorted(METERED))



@dataclass(frozen=True, slots=True)
class MinuteLoad:
    """One UTC minute's sums (over the tenants asked for), as the table keeps them."""

    minute: int  # UTC minutes since the epoch
    busy_us: int
    prefill_mtokens: int
    decode_mtokens: int
    kv_token_ms: int


# SQLite: the rows of one batch (`rowid > ?`), spread over their minutes by a recursive CTE.
SQLITE_ADD_MINUTES = f"""
WITH RECURSIVE sized AS (
    SELECT tenant, start AS s, MIN(MAX(duration_ms, 0), {MAX_SPAN_MS}) * 1000 AS d,
           CASE WHEN stream = 1 AND ttft_ms IS NOT NULL THEN MIN(MAX(ttft_ms, 0), {MAX_SPAN_MS}) * 1000
                ELSE 1000000 END AS ttft, {INPUT_SIDE} AS i, output_tokens AS o
    FROM requests WHERE rowid > ? AND endpoint IN ({LIVE_SQL}) AND outcome != 'rejected'),
timed AS (
    SELECT tenant, s, s + d AS e, s + MIN(ttft, d) AS f, MIN(ttft, d) AS fw, d - MIN(ttft, d) AS ow, i, o,
           s / {MINUTE_US} AS m0, MAX(s, s + d - 1) / {MINUTE_US} AS m1
    FROM sized),
span AS (
    SELECT tenant, s, e, f, fw, ow, i, o, m0, m1, m0 AS minute FROM timed
    UNION ALL
    SELECT tenant, s, e, f, fw, ow, i, o, m0, m1, minute + 1 FROM span WHERE minute < m1),
part AS (
    SELECT minute, tenant, s, e, f, fw, ow, i, o, m0, m1,
           MAX(minute * {MINUTE_US}, s) AS lo_s, MAX(minute * {MINUTE_US}, f) AS lo_f,
           MIN(minute * {MINUTE_US} + {MINUTE_US}, e) AS hi_e, MIN(minute * {MINUTE_US} + {MINUTE_US}, f) AS hi_f
    FROM span)
INSERT INTO minute_load (minute, tenant, busy_us, prefill_mtokens, decode_mtokens, kv_token_ms)
SELECT minute, tenant,
       SUM(MAX(0, hi_e - lo_s)),
       SUM(CASE WHEN fw = 0 THEN CASE WHEN minute = m0 THEN i * {MILLI} ELSE 0 END
                ELSE CAST({MILLI}.0 * i * MAX(0, hi_f - lo_s) / fw + 0.5 AS INTEGER) END),
       SUM(CASE WHEN ow = 0 THEN CASE WHEN minute = m1 THEN o * {MILLI} ELSE 0 END
                ELSE CAST({MILLI}.0 * o * MAX(0, hi_e - lo_f) / ow + 0.5 AS INTEGER) END),
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
    kv_token_ms = kv_token_ms + excluded.kv_token_ms"""

# The report's read: one row per minute in [lo, hi) with load, summed over tenants (or one).
MINUTES_SQL = """
SELECT minute, SUM(busy_us) AS busy_us, SUM(prefill_mtokens) AS prefill_mtokens,
       SUM(decode_mtokens) AS decode_mtokens, SUM(kv_token_ms) AS kv_token_ms
FROM minute_load WHERE {where}
GROUP BY minute
"""


def postgres_minutes(source: str) -> str:
    """The PostgreSQL form: the rows of `source` (the trigger's transition table, or `requests`
    when a migration fills the table), grouped per minute and tenant, ready to upsert."""
    return f"""SELECT minute, tenant,
       SUM(GREATEST(0, hi_e - lo_s)),
       SUM(CASE WHEN fw = 0 THEN CASE WHEN minute = m0 THEN i * {MILLI} ELSE 0 END
                ELSE floor({MILLI}::float8 * i * GREATEST(0, hi_f - lo_s) / fw + 0.5)::bigint END),
       SUM(CASE WHEN ow = 0 THEN CASE WHEN minute = m1 THEN o * {MILLI} ELSE 0 END
                ELSE floor({MILLI}::float8 * o * GREATEST(0, hi_e - lo_f) / ow + 0.5)::bigint END),
       SUM(floor((1::float8 * i * GREATEST(0, hi_e - lo_s)
                  + CASE WHEN ow > 0 AND hi_e > lo_f
                         THEN 1::float8 * o * ((1::float8 * (hi_e - f)) * (hi_e - f)
                                               - (1::float8 * (lo_f - f)) * (lo_f - f)) / (2::float8 * ow)
                         ELSE 0 END) / 1000::float8 + 0.5)::bigint)
FROM (
    SELECT g.minute, t.*,
           GREATEST(g.minute * {MINUTE_US}, t.s) AS lo_s, GREATEST(g.minute * {MINUTE_US}, t.f) AS lo_f,
           LEAST(g.minute * {MINUTE_US} + {MINUTE_US}, t.e) AS hi_e,
           LEAST(g.minute * {MINUTE_US} + {MINUTE_US}, t.f) AS hi_f
    FROM (
        SELECT tenant, s, s + d AS e, s + LEAST(ttft, d) AS f, LEAST(ttft, d) AS fw, d - LEAST(ttft, d) AS ow, i, o,
               s / {MINUTE_US} AS m0, GREATEST(s, s + d - 1) / {MINUTE_US} AS m1
        FROM (
            SELECT tenant, start AS s, LEAST(GREATEST(duration_ms, 0), {MAX_SPAN_MS}) * 1000 AS d,
                   CASE WHEN stream = 1 AND ttft_ms IS NOT NULL
                        THEN LEAST(GREATEST(ttft_ms, 0), {MAX_SPAN_MS}) * 1000 ELSE 1000000 END AS ttft,
                   {INPUT_SIDE} AS i, output_tokens AS o
            FROM {source} WHERE endpoint IN ({LIVE_SQL}) AND outcome != 'rejected') AS sized) AS t
    CROSS JOIN LATERAL generate_series(t.m0, t.m1) AS g(minute)) AS part
GROUP BY 1, 2"""
