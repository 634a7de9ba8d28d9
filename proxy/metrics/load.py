"""One finished request's share of the live load counters (docs/metrics.md, "Live load").

The same definitions as the report's `load_by_minute` (proxy/ledger/store/minutes.py): a
request is in flight for its duration (at most a day); its input-side tokens are prefilled
over its time to first token (a request not streamed: its first second) and its output
tokens decoded from the first token to its end; its KV tokens are its input side for the
whole duration plus the output produced so far. Integrated over the request, that is
input × duration + output × decode time ÷ 2 token-seconds. Prometheus' rate() of the
counters is then the mean concurrency, tokens per second and KV tokens in flight.
"""

from __future__ import annotations

from proxy.ledger.store.minutes import MAX_SPAN_MS

NOT_STREAMED_PREFILL_MS = 1000  # as the report: a request not streamed prefills over its first second


def request_load(duration_ms: int, ttft_ms: int | None, stream: bool, input_side: int, output: int
                 ) -> tuple[float, float]:
    """(seconds in flight, KV token-seconds); prefill and decode add the tokens themselves. A plain
    tuple: this runs once per request on the event loop, and a frozen dataclass cost more than the
    arithmetic (timeit)."""
    # Comparisons, not min()/max(): half the cost, and the usual case takes no branch.
    d = duration_ms if 0 <= duration_ms <= MAX_SPAN_MS else (0 if duration_ms < 0 else MAX_SPAN_MS)
    first = ttft_ms if stream and ttft_ms is not None else NOT_STREAMED_PREFILL_MS
    decode_ms = d - first if 0 <= first < d else (d if first < 0 else 0)
    # Token-milliseconds doubled stay integers; one division makes the float the counter adds.
    return d / 1000, (2 * input_side * d + output * decode_ms) / 2000
