"""The meter prices what real providers bill: hidden output, compaction passes at their own
band, per-call fees inside the cost, 1-hour cache writes, the provider's own figure beside
llmmeter's, and a region's premium (SPEC "Usage extraction", "Price tables, version 2").

Usage comes from real recorded responses in ../shared/fixtures, read by the same readers the
relay uses; prices are entries built here so every expected figure is worked out by hand."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import orjson
from prometheus_client import CollectorRegistry

from pricing import Price, PriceBook
from pricing.model import Band
from proxy.ledger.record import Record
from proxy.metering.estimate.estimator import Estimator
from proxy.metering.meter import Exchange, Meter
from proxy.metrics.metrics import Metrics
from proxy.protocol.tap import StreamTap
from proxy.protocol.usage import Observed, parse_body
from proxy.settings import Settings, Workloads
from tests.shared_data import RECORDINGS, shared_fixture

T0 = datetime(2020, 1, 1, tzinfo=UTC)
D = Decimal


class Kept:
    def __init__(self) -> None:
        self.records: list[Record] = []

    def append(self, record: Record) -> None:
        self.records.append(record)


def entry(model: str, **kw: Any) -> Price:
    fields = {"input": D(3), "output": D(15), "cache_read": D("0.3"), "cache_write": D("3.75"), **kw}
    return Price(model=model, tier="standard", effective_from=T0, source="test", match=(model,), **fields)


def meter(*prices: Price, from_total: frozenset[str] = frozenset()) -> tuple[Meter, CollectorRegistry]:
    book = PriceBook(prices)
    registry = CollectorRegistry()
    return Meter(book, Estimator(), Workloads(), Kept(), Metrics(Settings(), book, registry), from_total), registry


def exchange(endpoint: str, upstream: str, request: Any = None) -> Exchange:
    ex = Exchange(start=datetime.now(UTC), t0=time.perf_counter(), endpoint=endpoint, tenant="default", code=200)
    ex.upstream, ex.request = upstream, request
    ex.model_requested = request.get("model") if isinstance(request, dict) else None
    return ex


def body(name: str) -> Observed:
    endpoint = "messages" if name.startswith("anthropic") else "responses" if "responses" in name else "chat"
    observed, _ = parse_body(endpoint, shared_fixture(RECORDINGS / name).read_bytes())
    return observed


def stream(name: str, endpoint: str) -> Observed:
    data = shared_fixture(RECORDINGS / name).read_bytes()
    tap = StreamTap(endpoint, drop_usage_only=False)
    for i in range(0, len(data), 97):
        tap.feed(data[i:i + 97])
    tap.finish()
    return tap.observed()


def usd(units: int | None) -> Decimal:
    assert units is not None
    return D(units) / 10**10


def test_xai_reasoning_outside_completion_tokens_is_billed_as_output_on_a_from_total_upstream() -> None:
    # grok-3-mini: prompt 291 (244 cached), completion 26, total 506 = 291 + 26 + 189 reasoning.
    m, _ = meter(entry("grok-3-mini", input=D("0.3"), output=D("0.5"), cache_read=D("0.075"),
                              cache_write=D("0.3")), from_total=frozenset({"xai"}))
    observed = body("xai-chat-tool-reasoning.json")
    rec = m.record(exchange("chat", "xai"), observed, observed.usage, "upstream")
    assert (rec.input_tokens, rec.cache_read_tokens, rec.output_tokens, rec.reasoning_tokens) == (47, 244, 215, 189)
    assert "output_from_total" in rec.flags
    # 47 × 0.3 + 244 × 0.075 + 215 × 0.5 per million = 14.1 + 18.3 + 107.5 = 139.9 µ$
    assert usd(rec.cost_units) == D("0.0001399")
    # xAI's own figure, 1,399,000 ticks of 10^-10 USD: the same $0.0001399.
    assert rec.provider_cost_units == 1_399_000


def test_the_same_report_on_a_flag_upstream_is_flagged_and_counted_not_billed() -> None:
    m, registry = meter(entry("grok-3-mini"))
    observed = body("xai-chat-tool-reasoning.json")
    rec = m.record(exchange("chat", "elsewhere"), observed, observed.usage, "upstream")
    assert rec.output_tokens == 26 and "total_mismatch" in rec.flags and "output_from_total" not in rec.flags
    assert registry.get_sample_value("llmmeter_metering_faults_total", {"kind": "total_mismatch"}) == 1


def test_gemini_thinking_reported_only_in_the_total_becomes_output_and_reasoning() -> None:
    # total 109 vs prompt 35 + completion 12: 62 thinking tokens, reported nowhere else.
    m, _ = meter(entry("gemini-2.5-pro-preview-05-06"), from_total=frozenset({"gemini"}))
    observed = body("gemini-openai-compat-chat.json")
    rec = m.record(exchange("chat", "gemini"), observed, observed.usage, "upstream")
    assert (rec.input_tokens, rec.output_tokens, rec.reasoning_tokens) == (35, 74, 62)


def test_each_compaction_pass_is_priced_at_its_own_band() -> None:
    # Iterations: compaction 100 in + 55,096 5m writes + 131 out (input side 55,196, above the
    # 50,000 band); the message pass 229 in + 5 out stays at base prices.
    band = Band(above_input_tokens=50_000, input=D(6), output=D("22.5"), cache_write=D("7.5"))
    m, _ = meter(entry("claude-sonnet-4-6", bands=(band,)))
    observed = body("anthropic-compaction-iterations.json")
    rec = m.record(exchange("messages", "anthropic"), observed, observed.usage, "upstream")
    assert (rec.input_tokens, rec.cache_write_tokens, rec.output_tokens) == (329, 55_096, 136)
    compaction = 100 * D(6) + 55_096 * D("7.5") + 131 * D("22.5")  # 600 + 413,220 + 2,947.5
    message = 229 * D(3) + 5 * D(15)  # 687 + 75
    assert usd(rec.cost_units) == (compaction + message) / 10**6 == D("0.4175295")
    assert rec.price_band == 50_000


def test_web_searches_are_a_fee_inside_the_cost_and_counted_apart() -> None:
    # Stream with server tools: message_delta's cumulative input 22,397 supersedes message_start's
    # 2,068; 637 output tokens; 2 web search requests at $10 per 1,000.
    m, registry = meter(entry("claude-sonnet-4-20250514", web_search_per_1k=D(10)))
    observed = stream("anthropic-stream-websearch.sse", "messages")
    rec = m.record(exchange("messages", "anthropic"), observed, observed.usage, "upstream")
    assert (rec.input_tokens, rec.output_tokens, rec.web_search_calls) == (22_397, 637, 2)
    tokens = (22_397 * D(3) + 637 * D(15)) / 10**6  # 0.067191 + 0.009555
    assert usd(rec.fee_units) == D("0.02")
    assert usd(rec.cost_units) == tokens + D("0.02") == D("0.096746")
    labels = {"model": "claude-sonnet-4-20250514", "tenant": "default", "fee": "web_search"}
    assert registry.get_sample_value("llmmeter_fees_usd_total", labels) == 0.02


def test_calls_without_a_fee_price_are_flagged_not_silently_free() -> None:
    m, _ = meter(entry("claude-sonnet-4-20250514"))
    observed = stream("anthropic-stream-websearch.sse", "messages")
    rec = m.record(exchange("messages", "anthropic"), observed, observed.usage, "upstream")
    assert "fee_unpriced" in rec.flags and rec.fee_units == 0


def test_a_one_hour_ttl_asked_by_the_request_prices_unsplit_writes_at_the_1h_price() -> None:
    # A compatible server that reports only the total of cache writes.
    reply = orjson.dumps({"id": "msg_1", "type": "message", "model": "claude-sonnet-4", "content": [],
                          "usage": {"input_tokens": 10, "cache_creation_input_tokens": 1000, "output_tokens": 2}})
    request = {"model": "claude-sonnet-4", "max_tokens": 10, "system": [
        {"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": "1h"}}], "messages": []}
    m, _ = meter(entry("claude-sonnet-4", cache_write_1h=D(6)))
    observed, _ = parse_body("messages", reply)
    rec = m.record(exchange("messages", "anthropic", request), observed, observed.usage, "upstream")
    assert (rec.cache_write_tokens, rec.cache_write_1h_tokens) == (0, 1000)
    assert usd(rec.cost_units) == (10 * D(3) + 1000 * D(6) + 2 * D(15)) / 10**6
    # Without a 1h price the writes are priced at cache_write and the record says so.
    m, _ = meter(entry("claude-sonnet-4"))
    rec = m.record(exchange("messages", "anthropic", request), observed, observed.usage, "upstream")
    assert "cache_ttl_unpriced" in rec.flags
    assert usd(rec.cost_units) == (10 * D(3) + 1000 * D("3.75") + 2 * D(15)) / 10**6


def test_openrouter_cost_is_kept_exactly_beside_llmmeters() -> None:
    m, _ = meter(entry("openai/gpt-5.6-sol"))
    observed = body("openrouter-responses-cache-read.json")
    rec = m.record(exchange("responses", "openrouter"), observed, observed.usage, "upstream")
    assert rec.provider_cost_units == 21_960_000  # "cost": 0.002196, read from the text
    assert rec.cost_units is not None and rec.cost_units != rec.provider_cost_units


def test_a_region_with_its_own_entry_is_priced_there_and_an_unknown_one_is_flagged() -> None:
    us = Price(model="claude-opus-4-8", tier="standard", effective_from=T0, input=D("5.5"), output=D("27.5"),
               cache_read=D("0.55"), cache_write=D("6.875"), source="t", match=("claude-opus-4-8",),
               inference_geo="us")
    m, _ = meter(entry("claude-opus-4-8", input=D(5), output=D(25)), us)
    for geo, price, flagged in (("us", D("5.5"), False), ("eu", D(5), True), ("global", D(5), False)):
        reply = orjson.dumps({"id": "m", "type": "message", "model": "claude-opus-4-8", "content": [],
                              "usage": {"input_tokens": 1000, "output_tokens": 0, "inference_geo": geo}})
        observed, _ = parse_body("messages", reply)
        rec = m.record(exchange("messages", "anthropic"), observed, observed.usage, "upstream")
        assert usd(rec.cost_units) == 1000 * price / 10**6, geo
        assert ("geo_unpriced" in rec.flags) is flagged, geo


def test_web_searches_of_a_compacted_request_are_billed_beside_its_passes() -> None:
    # The fee calls are reported once, at the top; the passes carry only tokens.
    reply = orjson.dumps({"id": "m", "type": "message", "model": "claude-sonnet-4-6", "content": [], "usage": {
        "input_tokens": 100, "output_tokens": 50, "server_tool_use": {"web_search_requests": 3},
        "iterations": [{"type": "compaction", "input_tokens": 60, "output_tokens": 20},
                       {"type": "message", "input_tokens": 40, "output_tokens": 30}]}})
    m, _ = meter(entry("claude-sonnet-4-6", web_search_per_1k=D(10)))
    observed, _ = parse_body("messages", reply)
    rec = m.record(exchange("messages", "anthropic"), observed, observed.usage, "upstream")
    assert rec.web_search_calls == 3 and usd(rec.fee_units) == D("0.03")
    assert usd(rec.cost_units) == (100 * D(3) + 50 * D(15)) / 10**6 + D("0.03")


def test_a_client_cannot_ask_a_synchronous_request_onto_the_batch_tier() -> None:
    batch = Price(model="m", tier="batch", effective_from=T0, input=D("0.5"), output=D(1), cache_read=D(0),
                  cache_write=D("0.5"), source="t", match=("m",))
    m, _ = meter(entry("m"), batch)
    reply = orjson.dumps({"id": "c", "model": "m", "choices": [],
                          "usage": {"prompt_tokens": 1000, "completion_tokens": 0}})
    observed, _ = parse_body("chat", reply)
    ex = exchange("chat", "up", {"model": "m", "service_tier": "batch"})
    ex.tier_requested = "batch"
    rec = m.record(ex, observed, observed.usage, "upstream")
    assert rec.tier == "standard" and usd(rec.cost_units) == 1000 * D(3) / 10**6


def test_anthropic_speed_standard_is_no_hint() -> None:
    priority = Price(model="claude-opus-4-8", tier="priority", effective_from=T0, input=D(10), output=D(50),
                     cache_read=D(1), cache_write=D("12.5"), source="t", match=("claude-opus-4-8",))
    m, _ = meter(entry("claude-opus-4-8"), priority)
    reply = orjson.dumps({"id": "m", "type": "message", "model": "claude-opus-4-8", "content": [], "usage": {
        "input_tokens": 1000, "output_tokens": 0, "speed": "standard", "service_tier": "priority"}})
    observed, _ = parse_body("messages", reply)
    rec = m.record(exchange("messages", "anthropic"), observed, observed.usage, "upstream")
    assert rec.tier == "priority" and usd(rec.cost_units) == 1000 * D(10) / 10**6


def test_the_same_request_is_priced_by_the_entries_in_force_at_its_own_start() -> None:
    """The meter keeps its tier choice per request shape (proxy/metering/meter.py): a tier entry
    that comes into force later must still change the choice for requests after it. Before its
    entry exists, `priority` reads through the aliases (`highspeed`, unpriced: standard, flagged)."""
    later = datetime(2030, 1, 1, tzinfo=UTC)
    priority = Price(model="m", tier="priority", effective_from=later, input=D(6), output=D(30), cache_read=D(0),
                     cache_write=D(6), source="t", match=("m",))
    m, _ = meter(entry("m"), priority)
    reply = orjson.dumps({"id": "c", "model": "m", "service_tier": "priority", "choices": [],
                          "usage": {"prompt_tokens": 1000, "completion_tokens": 0}})
    observed, _ = parse_body("chat", reply)
    seen = []
    for start in (datetime(2029, 12, 31, tzinfo=UTC), later, datetime(2029, 6, 1, tzinfo=UTC), later):
        ex = exchange("chat", "up", {"model": "m"})
        ex.start = start
        rec = m.record(ex, observed, observed.usage, "upstream")
        seen.append((rec.tier, rec.price_tier, usd(rec.cost_units)))
    before = ("highspeed", "standard", 1000 * D(3) / 10**6)
    after = ("priority", "priority", 1000 * D(6) / 10**6)
    assert seen == [before, after, before, after]
