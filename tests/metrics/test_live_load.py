"""The live load counters (docs/metrics.md, "Live load"): what one request adds to each, checked
against the load it puts on every millisecond it is in flight, summed here independently."""

from __future__ import annotations

from fractions import Fraction

import pytest
from prometheus_client import CollectorRegistry

from pricing import PriceBook
from proxy.metrics.metrics import Metrics
from proxy.protocol.names import MISSING_KEY
from proxy.report.nodes import SHIPPED
from proxy.settings import NodeProfile, SelfHost, Settings
from tests.ledger.helpers import full_record

LIVE = ("llmmeter_in_flight_seconds_total", "llmmeter_prefill_tokens_total", "llmmeter_decode_tokens_total",
        "llmmeter_kv_token_seconds_total")


def by_millisecond(duration_ms: int, first_token_ms: int, input_side: int, output: int) -> tuple[Fraction, ...]:
    """Seconds in flight, prefill and decode tokens, KV token-seconds: each millisecond's share, summed.
    The loads are linear within a millisecond, so its midpoint gives its exact average. A phase of
    no time (first token at once, or at the end) has its tokens all at that instant."""
    busy = prefill = decode = kv = Fraction(0)
    if first_token_ms == 0:
        prefill += input_side
    if first_token_ms == duration_ms:
        decode += output
    for t in range(duration_ms):
        mid = Fraction(2 * t + 1, 2)
        busy += Fraction(1, 1000)
        if mid < first_token_ms:
            prefill += Fraction(input_side, first_token_ms)
            produced = Fraction(0)
        else:
            decode += Fraction(output, duration_ms - first_token_ms)
            produced = output * (mid - first_token_ms) / (duration_ms - first_token_ms)
        kv += (input_side + produced) / 1000
    return busy, prefill, decode, kv


def values(registry: CollectorRegistry, model: str) -> tuple[float | None, ...]:
    return tuple(registry.get_sample_value(name, {"model": model}) for name in LIVE)


def test_a_streamed_request_adds_its_exact_load() -> None:
    registry = CollectorRegistry()
    m = Metrics(Settings(), PriceBook([]), registry)
    rec = full_record(1, duration_ms=5_000, ttft_ms=1_200, input_tokens=2_000, cache_read_tokens=900,
                      cache_write_tokens=100, cache_write_1h_tokens=0, output_tokens=760)
    assert rec.input_side_tokens == 3_000
    m.observe(rec, None, 0.001)
    expected = by_millisecond(5_000, 1_200, 3_000, 760)
    assert values(registry, "other") == tuple(float(x) for x in expected)
    assert expected[3] == Fraction(3_000 * 5, 1) + Fraction(760 * 38, 10 * 2)  # input × d + output × decode ÷ 2


def test_a_request_not_streamed_prefills_over_its_first_second_and_requests_add_up() -> None:
    registry = CollectorRegistry()
    m = Metrics(Settings(), PriceBook([]), registry)
    shapes = [(3_000, 40, 7), (2_500, 1_000, 300), (700, 123, 45)]
    for i, (d, inp, out) in enumerate(shapes):
        m.observe(full_record(i, stream=False, ttft_ms=None, duration_ms=d, input_tokens=inp, cache_read_tokens=0,
                              cache_write_tokens=0, cache_write_1h_tokens=0, output_tokens=out), None, 0.001)
    sums = [sum(x) for x in zip(*(by_millisecond(d, min(1_000, d), inp, out) for d, inp, out in shapes),
                                strict=True)]
    got = values(registry, "other")
    for g, want in zip(got, sums, strict=True):
        assert g is not None and abs(Fraction(g) - want) <= want * Fraction(1, 10**12)


def test_batch_results_and_refusals_are_not_live_load() -> None:
    registry = CollectorRegistry()
    m = Metrics(Settings(), PriceBook([]), registry)
    m.observe(full_record(1, endpoint="batch"), None, 0.001)
    m.observe(full_record(2, outcome="rejected", code=401), None, 0.001)
    m.refused(MISSING_KEY, "chat", 0.002)
    assert values(registry, "other") == (0.0, 0.0, 0.0, 0.0)  # known at 0 from the start, never added to


def test_every_node_profile_exports_its_capacity_per_limit() -> None:
    registry = CollectorRegistry()
    Metrics(Settings(), PriceBook([]), registry)
    for p in SHIPPED:
        assert registry.get_sample_value("llmmeter_selfhost_node_capacity",
                                         {"node": p.name, "limit": "kv_cache"}) == p.kv_cache_tokens
    mine = NodeProfile(name="rented-4x", accelerators="4x H200", kv_cache_tokens=900_000,
                       prefill_tokens_per_s=20_000, decode_tokens_per_s=6_000)
    registry = CollectorRegistry()
    Metrics(Settings(selfhost=SelfHost(node_profiles=(mine,))), PriceBook([]), registry)
    got = {(s.labels["node"], s.labels["limit"]): s.value for f in registry.collect()
           if f.name == "llmmeter_selfhost_node_capacity" for s in f.samples}
    assert got == {("rented-4x", "kv_cache"): 900_000, ("rented-4x", "prefill"): 20_000,
                   ("rented-4x", "decode"): 6_000}


@pytest.mark.parametrize(("duration_ms", "ttft_ms"), [(2_000, 0), (2_000, 2_000), (800, 5_000), (0, None)])
def test_a_phase_of_no_time_has_its_tokens_at_once(duration_ms: int, ttft_ms: int | None) -> None:
    registry = CollectorRegistry()
    m = Metrics(Settings(), PriceBook([]), registry)
    m.observe(full_record(1, duration_ms=duration_ms, ttft_ms=ttft_ms, input_tokens=500, cache_read_tokens=0,
                          cache_write_tokens=0, cache_write_1h_tokens=0, output_tokens=90), None, 0.001)
    first = min(ttft_ms if ttft_ms is not None else 1_000, duration_ms)
    assert values(registry, "other") == tuple(float(x) for x in by_millisecond(duration_ms, first, 500, 90))


def test_a_request_counts_over_at_most_a_day() -> None:
    registry = CollectorRegistry()
    m = Metrics(Settings(), PriceBook([]), registry)
    day_ms = 86_400_000
    m.observe(full_record(1, duration_ms=3 * day_ms, ttft_ms=day_ms // 2, input_tokens=10, cache_read_tokens=0,
                          cache_write_tokens=0, cache_write_1h_tokens=0, output_tokens=4), None, 0.001)
    # 10 tokens held a day, and 4 decoded evenly over its second half: 4 × 43,200 s ÷ 2 token-seconds.
    assert values(registry, "other") == (86_400.0, 10.0, 4.0, 10 * 86_400 + 4 * 43_200 / 2)
