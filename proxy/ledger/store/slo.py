"""A row of the report's `slo` table (SPEC "Self-hosting, version 2"): how fast the API
answered, per model, tier and context band, over streamed metered requests that carry the
upstream's own usage and a time to first token. The figures come from migration 015's speed
histogram (proxy/ledger/store/histograms.py).
"""

from __future__ import annotations

from dataclasses import dataclass

# SPEC: bands by input-side tokens, below 32,768, below 131,072, and the rest.
BANDS = ("lt_32k", "32k_128k", "ge_128k")


@dataclass(frozen=True, slots=True)
class SloRow:
    model: str
    tier: str
    band: str  # lt_32k | 32k_128k | ge_128k
    requests: int  # the streamed requests with usage and a time to first token: what the TTFT rests on
    ttft_ms_p50: int
    ttft_ms_p95: int
    timed_requests: int  # those that ran past their first token: what the tokens/s rest on
    output_tokens_per_s_p50: float | None  # in 0.01 token/s, its histogram bucket's; None: no timed request
    output_tokens_per_s_p95: float | None
