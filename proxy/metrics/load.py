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

from dataclasses import dataclass

from proxy.ledger.store.minutes import MAX_SPAN_MS

NOT_STREAMED_PREFILL_MS = 1000  # as the report: a request not streamed prefills over its first second


@dataclass(frozen=True, slots=True)
class RequestLoad:
    in_flight_seconds: float
    prefill_tokens: int
    decode_tokens: int
    kv_token_seconds: float


def request_load(duration_ms: int, ttft_ms: int | None, stream: bool, input_side: int, output: int) -> RequestLoad:
    d = min(max(duration_ms, 0), MAX_SPAN_MS)
    ttft = min(max(ttft_ms, 0), MAX_SPAN_MS) if stream and ttft_ms is not None else NOT_STREAMED_PREFILL_MS
    decode_ms = d - min(ttft, d)
    # Token-milliseconds doubled stay integers; one division makes the float the counter adds.
    kv_twice_token_ms = 2 * input_side * d + output * decode_ms
    return RequestLoad(in_flight_seconds=d / 1000, prefill_tokens=input_side, decode_tokens=output,
                       kv_token_seconds=kv_twice_token_ms / 2000)
