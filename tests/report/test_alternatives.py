"""The same model at other providers: every shipped equivalent resolves in genai-prices, and
each cost equals the provider's published per-million prices applied by hand to the month's
categories (an independent computation: the price fields, not calc_price)."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from proxy.report import render
from proxy.report.alternatives import DEFAULT_EQUIVALENTS, Tokens, available, parse_equivalent, price_alternatives
from tests.strict import require

AT = datetime(2026, 11, 30, 23, 59, tzinfo=UTC)
MONTH = Tokens(input=3_000_000, cache_read=40_000_000, cache_write=2_000_000, output=1_500_000)


def _published(provider: str, model: str) -> dict[str, Decimal | None]:
    from genai_prices import data

    for p in data.providers:
        if p.id == provider:
            for m in p.models:
                price = m.prices
                if not isinstance(price, list) and m.match.is_match(model):
                    return {f: getattr(price, f) for f in ("input_mtok", "cache_read_mtok", "cache_write_mtok",
                                                           "output_mtok")}
    raise AssertionError(f"{provider}:{model} not in genai-prices' data")


def test_every_shipped_equivalent_is_priced_as_its_published_prices() -> None:
    require(available(), "genai-prices (llmmeter[prices]) is not installed")
    entries = DEFAULT_EQUIVALENTS["kimi-k3.1-pro"]
    got = price_alternatives(MONTH, entries, AT)
    assert len(got) == len(entries) and all(a.problem is None for a in got), got
    for a in got:
        p = _published(a.provider, a.provider_model)
        write_rate = p["cache_write_mtok"] if p["cache_write_mtok"] is not None else p["input_mtok"]
        assert p["input_mtok"] is not None and p["output_mtok"] is not None and p["cache_read_mtok"] is not None
        expected = (MONTH.input * p["input_mtok"] + MONTH.cache_read * p["cache_read_mtok"]
                    + MONTH.cache_write * write_rate + MONTH.output * p["output_mtok"]) / 10**6
        assert a.cost_usd == expected, (a, expected)
        assert a.missing_categories == (() if p["cache_write_mtok"] is not None else ("cache_write",))
    costs = [a.cost_usd for a in got]
    assert costs == sorted(costs)  # cheapest first
    # AWS charges twice the list price and prices cache writes; the rest list Moonshot's own prices.
    assert got[-1].provider == "aws" and got[-1].missing_categories == ()


def test_a_category_without_traffic_is_not_missing() -> None:
    require(available(), "genai-prices (llmmeter[prices]) is not installed")
    (a,) = price_alternatives(Tokens(input=10, output=5), ["together:moonshotai/Kimi-K3.1-Pro"], AT)
    assert a.missing_categories == () and a.cost_usd == (10 * Decimal(2) + 5 * Decimal(10)) / 10**6


def test_an_unknown_model_is_named_not_priced() -> None:
    require(available(), "genai-prices (llmmeter[prices]) is not installed")
    got = price_alternatives(MONTH, ["together:moonshotai/Kimi-K3.1-Pro", "fireworks:kimi-k3p1-pro"], AT)
    assert got[0].cost_usd is not None and got[1].cost_usd is None
    assert got[1].problem is not None and "fireworks" in got[1].problem


@pytest.mark.parametrize("bad", ["together", ":model", "together:", ""])
def test_an_entry_must_be_provider_and_model(bad: str) -> None:
    with pytest.raises(ValueError, match="provider_id:model"):
        parse_equivalent(bad)
    assert parse_equivalent("openrouter:moonshotai/kimi-k3.1-pro") == ("openrouter", "moonshotai/kimi-k3.1-pro")


# --- in the report: the seeded month (tests/report/conftest.py) -------------------------------------


def test_the_report_prices_each_models_month_at_its_equivalents(build: Any) -> None:
    require(available(), "genai-prices (llmmeter[prices]) is not installed")
    r = build("complete-utc")
    rows = [x for x in r.by_model if x.model == "kimi-k3.1-pro"]
    assert rows, "the seeded month has Kimi K3.1 Pro traffic"
    [kimi] = [m for m in r.alternatives if m.model == "kimi-k3.1-pro"]
    # Every tier of the model's API traffic, summed independently of the module.
    assert kimi.tokens == Tokens(sum(x.usage.input_tokens for x in rows), sum(x.usage.cache_read_tokens for x in rows),
                                 sum(x.usage.cache_writes for x in rows), sum(x.usage.output_tokens for x in rows))
    assert kimi.api_cost_units == sum(x.usage.cost_units for x in rows)
    assert [(a.provider, a.cost_usd) for a in kimi.rows] == \
        [(a.provider, a.cost_usd) for a in price_alternatives(kimi.tokens, DEFAULT_EQUIVALENTS["kimi-k3.1-pro"],
                                                              datetime(2026, 12, 1, tzinfo=UTC))]
    d = json.loads(render(r, "json"))
    assert {x["provider"] for x in d["alternatives"] if x["model"] == "kimi-k3.1-pro"} == \
        {e.split(":")[0] for e in DEFAULT_EQUIVALENTS["kimi-k3.1-pro"]}
    first = d["alternatives"][0]
    assert set(first) >= {"provider", "provider_model", "cost_usd", "missing_categories", "price_date"}
    assert Decimal(first["cost_usd"]) == kimi.rows[0].cost_usd  # exact, as a decimal string
    assert "## The same model elsewhere" in render(r, "md")
    assert any(row[0] == "alternatives" for row in csv.reader(io.StringIO(render(r, "csv"))))


def test_traffic_to_a_self_hosted_upstream_is_not_priced_elsewhere(build: Any) -> None:
    # In the "selfhosted" variant every Moonshot call went to a self-hosted upstream: nothing to compare.
    assert all(m.model != "kimi-k3.1-pro" or m.tokens == Tokens() for m in build("selfhosted").alternatives)


def test_the_decision_offers_the_cheapest_provider_for_the_models_it_serves(build: Any) -> None:
    require(available(), "genai-prices (llmmeter[prices]) is not installed")
    r = build("complete-utc")
    [kimi] = [m for m in r.alternatives if m.model == "kimi-k3.1-pro"]
    api_units = sum(x.usage.cost_units for x in r.by_model)
    # Kimi's traffic moves to its cheapest provider; every other model stays on the API as billed.
    cheapest = min(a.cost_usd for a in kimi.rows if a.cost_usd is not None)
    moved = cheapest + Decimal(api_units - kimi.api_cost_units) / 10**10
    [option] = [o for o in r.decision if o.choice.startswith("provider:")]
    assert option.choice == f"provider:{kimi.rows[0].provider}"
    assert option.monthly_cost_units == round(moved * 10**10)
    assert option.source.startswith("genai-prices for ")
