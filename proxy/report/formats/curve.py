"""`cost_curve` as every format shows it: JSON and CSV (USD per million tokens as exact decimal
strings, utilisations as fractions rounded half-even to 6 decimal places), the Markdown and
HTML table, and the HTML chart with the measured utilisation marked."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from typing import Any

from pricing import format_usd, usd
from proxy.report.curve import CostCurve
from proxy.report.formats.links import MEASURED_COST, node_anchor
from proxy.report.formats.svg import PALETTE, Axis, Line, Mark, line_chart, nice_ticks
from proxy.report.formats.tables import Cell, Column, Table
from proxy.report.numbers import money, money_decimal, percent

DIGITS = 6  # utilisations in JSON and CSV


def fraction(v: Fraction | None) -> float | None:
    return None if v is None else float(round(v, DIGITS))


def _usd(units: int | None) -> str | None:
    return None if units is None else format_usd(units)


def curve_dict(c: CostCurve | None) -> dict[str, Any] | None:
    """SPEC's four keys, then the deployment they are for and the figure at the measured utilisation."""
    if c is None:
        return None
    return {"points": [{"utilisation": fraction(p.utilisation), "self_hosted_usd_per_mtok": format_usd(
                p.self_hosted_units_per_mtok)} for p in c.points],
            "api_usd_per_mtok": _usd(c.api_units_per_mtok),
            "breakeven_utilisation": fraction(c.breakeven_utilisation),
            "measured_utilisation": fraction(c.measured_utilisation),
            "node": c.node, "nodes": c.nodes, "monthly_cost_usd": format_usd(c.monthly_cost_units),
            "api_cost_usd": format_usd(c.api_units), "api_tokens": c.api_tokens,
            "self_hosted_usd_per_mtok_at_measured": _usd(c.self_hosted_units_per_mtok_measured)}


def curve_rows(d: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A CSV row per point, each carrying the curve's single figures; one row without a point when
    there are none."""
    if d is None:
        return []
    single = {k: v for k, v in d.items() if k != "points"}
    return [{**p, **single} for p in d["points"]] or [{"utilisation": None, "self_hosted_usd_per_mtok": None,
                                                       **single}]


def _per_mtok(units: int | None) -> str:
    return "-" if units is None else money(units)


def breakeven_words(c: CostCurve) -> str:
    """Where the curve meets the API's price, in words."""
    if c.breakeven_utilisation is None:
        return ("no API cost this month to compare with" if c.api_units_per_mtok is not None or not c.api_tokens
                else "no load this month to scale")
    if c.breakeven_utilisation > 1:
        full = c.points[-1].self_hosted_units_per_mtok if c.points else None
        return (f"self-hosting never matches the API on this deployment: fully utilised it costs "
                f"{_per_mtok(full)} per million tokens, the API {_per_mtok(c.api_units_per_mtok)}")
    return f"self-hosting is cheaper above {percent(float(c.breakeven_utilisation))} utilisation"


def curve_table(c: CostCurve | None) -> Table:
    columns = (Column("utilisation", "%"), Column("self-hosted", "USD per million tokens"),
               Column("API", "USD per million tokens"))
    if c is None:
        return Table("cost_curve", "Cost per million tokens by utilisation", columns, (), empty="No node profiles.")
    api = Cell(_per_mtok(c.api_units_per_mtok), MEASURED_COST)
    own = "#" + node_anchor(c.node)  # the profile's figures and their sources
    rows = tuple((percent(float(p.utilisation), 0), Cell(money(p.self_hosted_units_per_mtok), own), api)
                 for p in c.points)
    note = (f"{c.nodes} x {c.node} (the cheapest profile at its nodes with redundancy) cost "
            f"{money(c.monthly_cost_units)} a month, for {c.api_tokens:,} API tokens this month at "
            f"{percent(float(c.measured_utilisation), 2)} measured utilisation"
            + (f" ({_per_mtok(c.self_hosted_units_per_mtok_measured)} per million tokens)"
               if c.self_hosted_units_per_mtok_measured is not None else "")
            + f"; {breakeven_words(c)}. At utilisation u the deployment serves this month's API tokens x u ÷ the "
              "measured utilisation for the same monthly cost. The node figures are vendor claims and assumptions "
              "(see the nodes table).")
    return Table("cost_curve", "Cost per million tokens by utilisation", columns, rows, note=note,
                 empty=f"No API tokens or no load this month: nothing to put on a curve. {note}")


def _dollars(units: int) -> float:
    return float(usd(units))


_PCT = Axis("utilisation of the deployment (%)", lambda v: f"{v:.1f}%", lambda vs: [f"{v:.0f}%" for v in vs])
_PER_MTOK = Axis("cost (USD per million tokens)", lambda v: money_decimal(Decimal(repr(v))))


def curve_svg(c: CostCurve | None) -> tuple[str, tuple[tuple[str, str], ...], str]:
    """The chart's SVG, legend and note; an empty SVG string when there is nothing to draw."""
    title = "Cost per million tokens: self-hosted by utilisation against the API"
    if c is None:
        return "", (), "No node profiles: no curve to draw."
    if not c.points or c.api_units_per_mtok is None or c.self_hosted_units_per_mtok_measured is None:
        return "", (), "No API tokens or no load this month: no curve to draw."
    api = _dollars(c.api_units_per_mtok)
    own = [(float(p.utilisation) * 100, _dollars(p.self_hosted_units_per_mtok)) for p in c.points]
    # The curve falls as 1/u: the axis stops at 3x the API's price or the curve's 100% end, whichever
    # is higher, and the curve starts where it enters the chart, so both stay readable.
    top = nice_ticks(max(api * 3, own[-1][1] * 1.2))[-1]
    k = own[0][0] * own[0][1]  # cost x utilisation is the same at every point
    start = min(k / top, 100.0)
    points = [(start, k / start)] + [(u, v) for u, v in own if u > start] if k else [(0.0, 0.0), (100.0, 0.0)]
    own_name = f"self-hosted: {c.nodes} x {c.node}, {money(c.monthly_cost_units)}/month"
    api_name = f"API: {money(c.api_units_per_mtok)} per million tokens this month"
    lines = [Line(own_name, points, PALETTE[1]), Line(api_name, [(0, api), (100, api)], PALETTE[0],
                                                        label_at_start=True)]
    u = float(c.measured_utilisation) * 100
    measured = _dollars(c.self_hosted_units_per_mtok_measured)
    off = measured > top
    marks = [Mark(u, min(measured, top), f"you: {percent(u / 100, 2)} utilisation"
                  + (" (off the chart)" if off else ""),
                  f"measured utilisation {percent(u / 100, 2)}: self-hosted "
                  f"{money(c.self_hosted_units_per_mtok_measured)} per million tokens", color="#222")]
    even = None
    if c.breakeven_utilisation is not None and c.breakeven_utilisation <= 1:
        even = float(c.breakeven_utilisation) * 100
        marks.append(Mark(even, api, f"break-even: {percent(even / 100)}",
                          f"break-even at {percent(even / 100, 2)} utilisation: {money(c.api_units_per_mtok)} "
                          "per million tokens either way", color=PALETTE[5]))
    svg = line_chart("cost-curve", title, lines, marks, _PCT, _PER_MTOK, 100.0, top, shade_from=even,
                     shade_labels=("API is cheaper", "self-hosting is cheaper"))
    legend = ((own_name, PALETTE[1]), (api_name, PALETTE[0]), ("measured utilisation", "#222"),
              *((("break-even", PALETTE[5]),) if even is not None else ()))
    return svg, legend, breakeven_words(c) + "."
