"""One definition of spend: llmmeter_cost_usd_total summed over `type` is the whole cost of the
records, fees included, as the ledger has it. Metrics on a fresh registry, priced by the real
calculator."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pricing import Price, PriceBook, Tokens, price_tokens
from proxy.metrics.metrics import Metrics
from proxy.settings import Settings, Tenant
from tests.ledger.helpers import full_record

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SONNET = Price(model="claude-sonnet-4.5", tier="standard", effective_from=T0, input=Decimal("3"),
               output=Decimal("15"), cache_read=Decimal("0.30"), cache_write=Decimal("3.75"), source="test",
               cache_write_1h=Decimal("6"), web_search_per_1k=Decimal("10"))


def cost_samples(registry: CollectorRegistry) -> dict[str, float]:
    text = generate_latest(registry).decode()
    out: dict[str, float] = {}
    for f in text_string_to_metric_families(text):
        for s in f.samples:
            if s.name == "llmmeter_cost_usd_total":
                out[s.labels["type"]] = out.get(s.labels["type"], 0.0) + s.value
    return out


def test_the_cost_counter_holds_fees_under_their_own_type() -> None:
    registry = CollectorRegistry()
    m = Metrics(Settings(tenants=(Tenant("team-b"),)), PriceBook([SONNET]), registry)
    priced = price_tokens(SONNET, Tokens(input=1000, cache_read=500, cache_write=2000, output=500,
                                         cache_write_1h=4000, web_search_calls=2))
    rec = full_record(1, model="claude-sonnet-4.5", tier="standard", tenant="team-b", flags=[],
                      input_tokens=1000, cache_read_tokens=500, cache_write_tokens=2000, cache_write_1h_tokens=4000,
                      output_tokens=500, web_search_calls=2, cost_units=priced.cost.total)
    m.observe(rec, priced.cost, 0.001)
    by_type = cost_samples(registry)
    assert by_type["web_search"] == pytest.approx(0.02)  # 2 searches at $10 per 1,000
    # The whole record, fees included: what the ledger's cost_units says.
    assert sum(by_type.values()) == pytest.approx(priced.cost.total / 10**10)
    assert sum(by_type.values()) == pytest.approx(rec.cost_units / 10**10)
    # The fees counter keeps its breakdown by fee, and says where else the amount is.
    assert registry.get_sample_value("llmmeter_fees_usd_total", {"model": "claude-sonnet-4.5", "tenant": "team-b",
                                                                  "fee": "web_search"}) == pytest.approx(0.02)
    text = generate_latest(registry).decode()
    [help_line] = [ln for ln in text.splitlines() if ln.startswith("# HELP llmmeter_fees_usd_total")]
    assert "llmmeter_cost_usd_total" in help_line and "inside" not in help_line
