"""Counters the configuration names exist at 0 from the start, so increase() and rate() see their
first step; their number is bounded by the configuration."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pricing import Price, PriceBook
from pricing.model import BILLING_TYPES
from proxy.metrics.known import known_series
from proxy.metrics.metrics import Metrics
from proxy.protocol.names import UPSTREAM_ERROR_KINDS
from proxy.settings import Settings, Tenant, Upstream
from tests.ledger.helpers import full_record

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def price(model: str, tier: str) -> Price:
    return Price(model=model, tier=tier, effective_from=T0, input=Decimal("2"), output=Decimal("8"),
                 cache_read=Decimal("0.5"), cache_write=Decimal("2"), source="test")


BOOK = PriceBook([price("kimi-k3.1-pro", "standard"), price("kimi-k3.1-pro", "highspeed"),
                  price("kimi-k2", "standard"), price("gpt-test", "standard")])
SETTINGS = Settings(
    upstreams=(Upstream("moonshot", "http://127.0.0.1:1/v1", models=("kimi-*",)),
               Upstream("local", "http://127.0.0.1:2/v1")),  # routes anything: names no model
    tenants=(Tenant("search-team"), Tenant("agents")))


def scrape(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples if not s.name.endswith("_created")}


def names(scraped: dict[tuple[str, tuple[tuple[str, str], ...]], float], metric: str) -> set[tuple[str, ...]]:
    return {tuple(v for _, v in labels) for (n, labels), _ in scraped.items() if n == metric}


def test_known_series_are_exported_at_zero_before_any_request() -> None:
    registry = CollectorRegistry()
    Metrics(SETTINGS, BOOK, registry)
    scraped = scrape(registry)
    families = ("llmmeter_tokens_total", "llmmeter_cost_usd_total", "llmmeter_fees_usd_total",
                "llmmeter_reasoning_tokens_total", "llmmeter_provider_cost_usd_total",
                "llmmeter_provider_costed_usd_total", "llmmeter_tagged_cost_usd_total",
                "llmmeter_estimated_requests_total", "llmmeter_unpriced_requests_total",
                "llmmeter_upstream_errors_total")
    assert all(v == 0 for (n, _), v in scraped.items() if n in families)
    # model, tier, tenant, type (sorted label names: model, tenant, tier, type)
    tokens = names(scraped, "llmmeter_tokens_total")
    assert ("kimi-k3.1-pro", "agents", "highspeed", "output") in tokens
    assert {(m, t) for m, _, t, _ in tokens} == {("kimi-k3.1-pro", "standard"), ("kimi-k3.1-pro", "highspeed"),
                                                 ("kimi-k2", "standard")}  # gpt-test: no upstream names it
    assert len(tokens) == 3 * 2 * len(BILLING_TYPES)
    assert {k for *_, k in names(scraped, "llmmeter_cost_usd_total")} == {*BILLING_TYPES, "web_search"}
    assert names(scraped, "llmmeter_fees_usd_total") >= {("web_search", "kimi-k2", "search-team")}
    assert names(scraped, "llmmeter_estimated_requests_total") == {("kimi-k3.1-pro",), ("kimi-k2",), ("other",)}
    assert names(scraped, "llmmeter_unpriced_requests_total") == {("other",)}
    assert ("other", "long") in names(scraped, "llmmeter_tagged_cost_usd_total")
    assert ("kimi-k2", "agents") in names(scraped, "llmmeter_provider_cost_usd_total")
    assert names(scraped, "llmmeter_upstream_errors_total") == {
        (kind, up) for up in ("moonshot", "local") for kind in UPSTREAM_ERROR_KINDS}


def test_an_unpriced_call_after_start_is_a_step_from_zero() -> None:
    registry = CollectorRegistry()
    m = Metrics(SETTINGS, BOOK, registry)
    assert registry.get_sample_value("llmmeter_unpriced_requests_total", {"model": "other"}) == 0
    m.observe(full_record(1, model="mystery-model-9", tenant="agents", flags=[]), None, 0.001)
    assert registry.get_sample_value("llmmeter_unpriced_requests_total", {"model": "other"}) == 1


def test_the_count_is_bounded_by_the_configuration() -> None:
    known = known_series(SETTINGS, BOOK)
    pairs, models, tenants, upstreams = 3, 2, 2, 2
    tags, workloads = 0 + 1, 4 + 1  # no tag declared: `other`; the four classes and `other`
    assert known.count() == (pairs * tenants * (5 + 6 + 1) + models * tenants * (1 + 2) + (models + 1) + 1
                             + tags * workloads + upstreams * len(UPSTREAM_ERROR_KINDS) + 4 * (models + 1))
    # Without `models` globs and tenants: only the fixed series.
    bare = known_series(Settings(upstreams=(Upstream("default", "http://127.0.0.1:1/v1"),)), BOOK)
    assert bare.count() == 1 + 1 + tags * workloads + len(UPSTREAM_ERROR_KINDS) + 4


def test_globs_naming_too_many_series_leave_the_per_model_ones_out() -> None:
    wide = known_series(SETTINGS, BOOK, cap=50)
    assert wide.over_cap == known_series(SETTINGS, BOOK).count()
    assert wide.tokens == wide.cost == wide.fees == () and wide.estimated == (("other",),)
    assert wide.count() == 1 + 1 + 5 + 2 * len(UPSTREAM_ERROR_KINDS) + 4
