"""Version-2 billing in /metrics: 1-hour cache writes, per-call fees, a provider's own cost, and
the 1-hour price in force. Metrics on a fresh registry, priced by the real calculator, read back
from the text exposition a scrape gets."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pricing import Cost, Price, PriceBook, Tokens, price_tokens
from proxy.ledger.record import Record
from proxy.metrics.metrics import Metrics
from proxy.settings import Settings, Tenant
from tests.ledger.helpers import full_record

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SONNET = Price(model="claude-sonnet-4.5", tier="standard", effective_from=T0, input=Decimal("3"),
               output=Decimal("15"), cache_read=Decimal("0.30"), cache_write=Decimal("3.75"), source="test",
               cache_write_1h=Decimal("6"), web_search_per_1k=Decimal("10"))
PLAIN = Price(model="kimi-k3.1-pro", tier="standard", effective_from=T0, input=Decimal("2"),
              output=Decimal("8"), cache_read=Decimal("0.5"), cache_write=Decimal("2"), source="test")
USD = 10**10


@pytest.fixture
def metrics() -> tuple[Metrics, CollectorRegistry]:
    registry = CollectorRegistry()
    settings = Settings(tenants=(Tenant("search-team"),))
    return Metrics(settings, PriceBook([SONNET, PLAIN]), registry), registry


def samples(registry: CollectorRegistry, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Every sample of one metric in the scrape text, keyed by its sorted labels."""
    text = generate_latest(registry).decode()
    return {tuple(sorted(s.labels.items())): s.value
            for f in text_string_to_metric_families(text) for s in f.samples if s.name == name}


def one(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def record(i: int, **over: object) -> Record:
    fields: dict[str, object] = dict(model="claude-sonnet-4.5", tier="standard", tenant="search-team",
                                     flags=[], input_tokens=1000, cache_read_tokens=0, cache_write_tokens=2000,
                                     cache_write_1h_tokens=4000, output_tokens=500, web_search_calls=3)
    fields.update(over)
    return full_record(i, **fields)


def test_one_hour_writes_and_web_search_fees_are_counted_and_priced(
        metrics: tuple[Metrics, CollectorRegistry]) -> None:
    m, registry = metrics
    priced = price_tokens(SONNET, Tokens(input=1000, cache_read=0, cache_write=2000, output=500, cache_write_1h=4000,
                                         web_search_calls=3))
    # 4,000 1h writes at $6/M = $0.024; 3 searches at $10/1k = $0.03; 2,000 5m writes at $3.75/M = $0.0075.
    assert (priced.cost.cache_write_1h, priced.cost.web_search, priced.cost.cache_write) == (
        240_000_000, 300_000_000, 75_000_000)
    m.observe(record(1), priced.cost, 0.001)
    m.observe(record(2), priced.cost, 0.001)
    base = {"model": "claude-sonnet-4.5", "tier": "standard", "tenant": "search-team"}
    assert one(registry, "llmmeter_tokens_total", **base, type="cache_write_1h") == 8000
    assert one(registry, "llmmeter_tokens_total", **base, type="cache_write") == 4000
    assert one(registry, "llmmeter_cost_usd_total", **base, type="cache_write_1h") == pytest.approx(0.048)
    assert one(registry, "llmmeter_cost_usd_total", **base, type="cache_write") == pytest.approx(0.015)
    assert one(registry, "llmmeter_fees_usd_total", model="claude-sonnet-4.5", tenant="search-team",
               fee="web_search") == pytest.approx(0.06)
    # Fees are in the cost counter under their own type, so its sum is the whole cost.
    assert {dict(k)["type"] for k in samples(registry, "llmmeter_cost_usd_total")} == {
        "input", "cache_write", "cache_write_1h", "output", "web_search"}  # no cache reads: never touched
    assert one(registry, "llmmeter_cost_usd_total", **base, type="web_search") == pytest.approx(0.06)
    assert sum(samples(registry, "llmmeter_cost_usd_total").values()) == pytest.approx(2 * priced.cost.total / USD)
    # The tag's cost is the whole record's, fees included.
    assert sum(samples(registry, "llmmeter_tagged_cost_usd_total").values()) == pytest.approx(
        2 * priced.cost.total / USD)
    # The input-side histogram counts the 1h writes: 7,000 tokens a request.
    assert one(registry, "llmmeter_request_input_tokens_sum", model="claude-sonnet-4.5") == 14000


def test_no_fee_series_without_calls(metrics: tuple[Metrics, CollectorRegistry]) -> None:
    m, registry = metrics
    m.observe(record(1, web_search_calls=0, cache_write_1h_tokens=0), Cost(10, 0, 0, 10), 0.001)
    assert samples(registry, "llmmeter_fees_usd_total") == {}
    assert one(registry, "llmmeter_tokens_total", model="claude-sonnet-4.5", tier="standard", tenant="search-team",
               type="cache_write_1h") is None


def test_provider_cost_beside_llmmeters_own(metrics: tuple[Metrics, CollectorRegistry]) -> None:
    m, registry = metrics
    labels = {"model": "kimi-k3.1-pro", "tenant": "search-team"}
    mine = Cost(2 * USD, 0, 0, 1 * USD)  # $3
    m.observe(record(1, model="kimi-k3.1-pro", provider_cost_units=31 * USD // 10), mine, 0.001)
    m.observe(record(2, model="kimi-k3.1-pro", provider_cost_units=None), mine, 0.001)
    # An unpriced request's provider figure still counts; llmmeter's own has nothing to add.
    m.observe(record(3, model="kimi-k3.1-pro", provider_cost_units=USD // 2), None, 0.001)
    assert one(registry, "llmmeter_provider_cost_usd_total", **labels) == pytest.approx(3.6)
    # llmmeter's cost of the requests that had a provider figure: record 1 only, not record 2.
    assert one(registry, "llmmeter_provider_costed_usd_total", **labels) == pytest.approx(3.0)
    assert sum(v for k, v in samples(registry, "llmmeter_cost_usd_total").items()
               if dict(k)["model"] == "kimi-k3.1-pro") == pytest.approx(6.0)


def test_price_gauge_has_the_one_hour_price_only_where_an_entry_has_one(
        metrics: tuple[Metrics, CollectorRegistry]) -> None:
    _, registry = metrics
    prices = {(dict(k)["model"], dict(k)["type"]): v for k, v in
              samples(registry, "llmmeter_price_per_million_usd").items()}
    assert prices[("claude-sonnet-4.5", "cache_write_1h")] == 6.0
    assert prices[("claude-sonnet-4.5", "cache_write")] == 3.75
    assert ("kimi-k3.1-pro", "cache_write_1h") not in prices
    assert {t for (model, t) in prices if model == "kimi-k3.1-pro"} == {"input", "cache_read", "cache_write", "output"}
