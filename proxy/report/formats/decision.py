"""`decision` as every format shows it: JSON and CSV rows (money as exact decimal strings), and
the one table on the first page of the Markdown and HTML reports, with one line when the
answer is far from close."""

from __future__ import annotations

from typing import Any

from pricing import format_usd
from proxy.report.decision import Option, answer, far_from_close

__all__ = ["decision_dict", "decision_table", "far_from_close"]
from proxy.report.formats.curve import fraction
from proxy.report.formats.tables import Column, Table
from proxy.report.numbers import money

_BINDING = {"kv_cache": "KV cache", "prefill": "prefill", "decode": "decode", "none": "-"}


def decision_dict(o: Option) -> dict[str, Any]:
    """SPEC's four keys, then where the cost comes from and, for self-hosting, its nodes and utilisation."""
    return {"choice": o.choice, "monthly_cost_usd": format_usd(o.monthly_cost_units), "binding": o.binding,
            "flips_at": o.flips_at, "source": o.source, "nodes": o.nodes, "utilisation": fraction(o.utilisation)}


def decision_table(options: tuple[Option, ...]) -> Table:
    best = answer(options)
    rows = tuple(("→ " if o is best else "") + o.choice for o in options)
    body = tuple((choice, money(o.monthly_cost_units), "-" if o.nodes is None else str(o.nodes),
                  "-" if o.binding is None else _BINDING.get(o.binding, o.binding), o.flips_at, o.source)
                 for choice, o in zip(rows, options, strict=True))
    return Table("decision", "The decision: this month's traffic, each way",
                 (Column("option", numeric=False), Column("cost", "USD per month"), Column("nodes"),
                  Column("binding limit", numeric=False), Column("what would change the answer", prose=True,
                                                                 numeric=False),
                  Column("where the cost comes from", prose=True, numeric=False)), body,
                 note="→ marks the answer, the cheapest option. Self-hosting costs rest "
                      "on the node profiles' figures (vendor claims and assumptions, see the nodes table) and "
                      "[selfhost]; the API's is measured.",
                 empty="No options: no API traffic and no node profiles.")
