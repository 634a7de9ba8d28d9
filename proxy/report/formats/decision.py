"""`decision` as every format shows it: JSON and CSV rows (money as exact decimal strings), and
the one table on the first page of the Markdown and HTML reports, with one line when the
answer is far from close."""

from __future__ import annotations

from typing import Any

from pricing import format_usd
from proxy.report.decision import Option, answer, far_from_close

__all__ = ["decision_dict", "decision_table", "far_from_close"]
from proxy.report.formats.curve import fraction
from proxy.report.formats.links import ASSUMPTIONS, CURVE, MEASURED_COST, node_anchor, provider_anchor
from proxy.report.formats.tables import Cell, Column, Table, Value
from proxy.report.numbers import money

_BINDING = {"kv_cache": "KV cache", "prefill": "prefill", "decode": "decode", "none": "-"}


def decision_dict(o: Option) -> dict[str, Any]:
    """SPEC's four keys, then where the cost comes from and, for self-hosting, its nodes and utilisation."""
    return {"choice": o.choice, "monthly_cost_usd": format_usd(o.monthly_cost_units), "binding": o.binding,
            "flips_at": o.flips_at, "source": o.source, "nodes": o.nodes, "utilisation": fraction(o.utilisation)}


def origin(o: Option) -> str:
    """Where an option's monthly cost comes from: the measured bill, the alternatives row that prices
    the provider (with its price date), or the node profile's row with its figures' sources."""
    kind, _, name = o.choice.partition(":")
    if kind == "provider":
        return "#" + provider_anchor(name)
    if kind == "self_host":
        return "#" + node_anchor(name)
    return MEASURED_COST


def decision_table(options: tuple[Option, ...]) -> Table:
    best = answer(options)
    rows = tuple(("→ " if o is best else "") + o.choice for o in options)

    def row(choice: str, o: Option) -> tuple[Value, ...]:
        where = origin(o)
        own = o.nodes is not None  # self-hosted: nodes, binding and utilisation from the measured load
        return (choice, Cell(money(o.monthly_cost_units), where), Cell(str(o.nodes), where) if own else "-",
                "-" if o.binding is None else Cell(_BINDING.get(o.binding, o.binding), where),
                Cell(o.flips_at, CURVE) if own else o.flips_at,
                Cell(o.source, ASSUMPTIONS if own else where))

    body = tuple(row(choice, o) for choice, o in zip(rows, options, strict=True))
    return Table("decision", "The decision: this month's traffic, each way",
                 (Column("option", numeric=False), Column("cost", "USD per month"), Column("nodes"),
                  Column("binding limit", numeric=False), Column("what would change the answer", prose=True,
                                                                 numeric=False),
                  Column("where the cost comes from", prose=True, numeric=False)), body,
                 note="→ marks the answer, the cheapest option. Each figure links to where it comes from: the "
                      "API's cost to the month's bill (measured), a provider's to its prices and their date, a "
                      "self-hosted option's to its node profile, whose figures link to their sources (vendor "
                      "claims and assumptions), and to the [selfhost] assumptions.",
                 empty="No options: no API traffic and no node profiles.")
