"""`alternatives` as JSON and CSV rows and as the Markdown/HTML table (SPEC "Self-hosting,
version 2"): one row per model and equivalent provider model, cheapest first, money exact."""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from importlib import metadata
from typing import Any

from pricing import format_usd
from proxy.report.alternatives import ModelAlternatives
from proxy.report.formats.links import MEASURED_COST, price_href, provider_anchor
from proxy.report.formats.tables import Cell, Column, Table, Value
from proxy.report.numbers import money, money_decimal


def alternatives_rows(models: tuple[ModelAlternatives, ...]) -> list[dict[str, Any]]:
    """SPEC's keys, then the model, what the API billed for the same tokens, and why a row has no cost."""
    out = []
    for m in models:
        for a in m.rows:
            out.append({"provider": a.provider, "provider_model": a.provider_model,
                        "cost_usd": None if a.cost_usd is None else format(a.cost_usd, "f"),
                        "missing_categories": list(a.missing_categories),
                        "price_date": None if a.price_date is None else a.price_date.isoformat(),
                        "model": m.model, "api_cost_usd": format_usd(m.api_cost_units),
                        "api_unpriced_requests": m.api_unpriced_requests, "problem": a.problem})
    return out


def alternatives_csv(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**r, "missing_categories": " ".join(r["missing_categories"])} for r in rows]


def price_words(day: date | None) -> str:
    """The price's source and date: genai-prices' start date of the price in force, or that it has none."""
    return f"genai-prices {_version()}, " + (f"from {day.isoformat()}" if day else "undated")


def _version() -> str:
    try:
        return metadata.version("genai-prices")
    except metadata.PackageNotFoundError:
        return "(not installed)"


def alternatives_table(models: tuple[ModelAlternatives, ...], priced: bool) -> Table:
    body: list[tuple[Value, ...]] = []
    anchored: set[str] = set()
    for m in models:
        api = money(m.api_cost_units) + (f" + {m.api_unpriced_requests} unpriced" if m.api_unpriced_requests else "")
        body.append((m.model, "the API used (as billed)", "", Cell(api, MEASURED_COST), "", "",
                     Cell("ledger (measured)", MEASURED_COST)))
        for a in m.rows:
            # The decision's provider option links to the first row of its provider.
            first = provider_anchor(a.provider) not in anchored
            anchored.add(provider_anchor(a.provider))
            name = Cell(a.provider, anchor=provider_anchor(a.provider)) if first else a.provider
            if a.cost_usd is None:
                body.append((m.model, name, a.provider_model, "-", "", "", a.problem or ""))
                continue
            source = price_href(a.provider)
            body.append((m.model, name, a.provider_model, Cell(money_decimal(a.cost_usd), source),
                         _versus(a.cost_usd, m.api_cost_units), ", ".join(a.missing_categories) or "-",
                         Cell(price_words(a.price_date), source)))
    if not priced:
        note = "genai-prices is not installed (pip install 'llmmeter[prices]'): no provider was priced."
    else:
        note = ("This month's tokens of each model, category by category, priced as genai-prices' calc_price "
                "prices them for each provider model that is the same model ([[selfhost.equivalent]]). A "
                "missing category is one that provider lists no price for; genai-prices then charges it at "
                "that provider's input price. Each cost links to the provider's prices in genai-prices; "
                "'undated' is a price genai-prices gives no start date.")
    return Table("alternatives", "The same model elsewhere",
                 (Column("model", numeric=False), Column("provider", numeric=False),
                  Column("provider model", numeric=False), Column("cost", "USD"), Column("vs the API"),
                  Column("missing categories", numeric=False), Column("price", numeric=False)),
                 tuple(body), note=note, empty="No traffic this month to a model with known equivalents.")


def _versus(cost: Decimal, api_units: int) -> str:
    if not api_units:
        return "-"
    api = Decimal(api_units) / 10**10
    return f"{(cost - api) / api:+.1%}"
