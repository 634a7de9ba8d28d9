"""The SQL of the report's `slo` table (SPEC "Self-hosting, version 2"): how fast the API
answered, per model, tier and context band, over streamed metered requests that carry the
upstream's own usage and a time to first token.

Each query returns one row per key and distinct value with its count, so Python finds exact
nearest-rank percentiles from a few thousand rows, never from every request.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.ledger.store.sql import INPUT_SIDE, METERED_SQL

# SPEC: bands by input-side tokens.
BANDS = ("lt_32k", "32k_128k", "ge_128k")
_BAND = (f"CASE WHEN {INPUT_SIDE} < 32768 THEN 'lt_32k' WHEN {INPUT_SIDE} < 131072 THEN '32k_128k' "
         "ELSE 'ge_128k' END AS band")
_FROM = (f"FROM requests WHERE {{where}} AND stream = 1 AND usage_source = 'upstream' "
         f"AND ttft_ms IS NOT NULL AND endpoint IN ({METERED_SQL})")
_KEY = f"COALESCE(model, model_requested, '') AS model, COALESCE(tier, '') AS tier, {_BAND}"
SLO_TTFT_SQL = f"SELECT {_KEY}, ttft_ms AS value, COUNT(*) AS n {_FROM} GROUP BY 1, 2, 3, 4"
# Output tokens per second after the first token, in hundredths, rounded down (integer division on
# both backends), over the requests that ran at least a millisecond past their first token.
SLO_RATE_SQL = (f"SELECT {_KEY}, output_tokens * 100000 / (duration_ms - ttft_ms) AS value, COUNT(*) AS n "
                f"{_FROM} AND duration_ms > ttft_ms GROUP BY 1, 2, 3, 4")


@dataclass(frozen=True, slots=True)
class SloRow:
    model: str
    tier: str
    band: str  # lt_32k | 32k_128k | ge_128k
    requests: int  # the streamed requests with usage and a time to first token: what the TTFT rests on
    ttft_ms_p50: int
    ttft_ms_p95: int
    timed_requests: int  # those that ran past their first token: what the tokens/s rest on
    output_tokens_per_s_p50: float | None  # to 0.01 token/s, rounded down; None: no timed request
    output_tokens_per_s_p95: float | None
