"""The report's tables as people read them, built once for the Markdown and HTML formats.

A `Table` holds text already formatted (numbers.py), which columns are numbers (aligned
right) and their units, and a totals row where adding up the rows means something.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from zoneinfo import ZoneInfo

from proxy.protocol.names import WORKLOADS
from proxy.report.model import Report, SelfHosting, Usage
from proxy.report.numbers import count, money, percent

WORKLOAD_NAMES = {w: w.replace("_", " ") for w in WORKLOADS}  # "very_long" reads "very long"


@dataclass(frozen=True, slots=True)
class Column:
    title: str
    unit: str = ""  # shown under or after the title: tokens, USD, %
    numeric: bool = True
    prose: bool = False  # a sentence that may wrap, not a name or a number


@dataclass(frozen=True, slots=True)
class Table:
    key: str  # the report section it shows, e.g. by_model
    title: str
    columns: tuple[Column, ...]
    rows: tuple[tuple[str, ...], ...]
    total: tuple[str, ...] | None = None
    note: str = ""


def _label(title: str) -> Column:
    return Column(title, numeric=False)


_USAGE = (Column("requests", "count"), Column("input", "tokens"), Column("cache read", "tokens"),
          Column("cache write", "tokens"), Column("output", "tokens"), Column("cost", "USD"),
          Column("share of cost", "%"))
_HITS = Column("cache-hit rate", "%")


def _usage(u: Usage, share: float) -> tuple[str, ...]:
    return (count(u.requests), count(u.input_tokens), count(u.cache_read_tokens), count(u.cache_write_tokens),
            count(u.output_tokens), money(u.cost_units), percent(share))


def _sum(usages: Sequence[Usage]) -> Usage:
    return sum(usages, Usage())


def _breakdown(key: str, title: str, labels: Sequence[str], rows: Sequence[tuple[Sequence[str], Usage, float]],
               hits: bool = False, extra: Sequence[Column] = (),
               extra_values: Callable[[int], Sequence[str]] = lambda i: ()) -> Table:
    """Label columns, the usage columns, then `extra` columns; a totals row summing the rows shown."""
    columns = (*map(_label, labels), *_USAGE, *((_HITS,) if hits else ()), *extra)
    body = tuple((*names, *_usage(u, share), *((percent(u.cache_hit_rate),) if hits else ()), *extra_values(i))
                 for i, (names, u, share) in enumerate(rows))
    whole = _sum([u for _, u, _ in rows])
    total = ("Total", *([""] * (len(labels) - 1)), *_usage(whole, sum(s for _, _, s in rows)),
             *((percent(whole.cache_hit_rate),) if hits else ()), *([""] * len(extra)))
    return Table(key, title, columns, body, total if rows else None)


def report_tables(r: Report) -> dict[str, Table]:
    """Every table of the report, by section key."""
    t = r.totals.usage
    tables = [
        Table("totals", "Totals", (Column("requests", "count"), Column("input", "tokens"),
                                   Column("cache read", "tokens"), Column("cache write", "tokens"),
                                   Column("output", "tokens"), Column("reasoning", "tokens"), Column("cost", "USD")),
              ((count(t.requests), count(t.input_tokens), count(t.cache_read_tokens), count(t.cache_write_tokens),
                count(t.output_tokens), count(t.reasoning_tokens), money(t.cost_units)),),
              note="Reasoning tokens are part of output tokens, and billed as output."),
        _by_model(r),
        _breakdown("by_tenant", "By tenant", ("tenant",),
                   [((x.tenant,), x.usage, x.cost_share) for x in r.by_tenant],
                   extra=(Column("input side p50", "tokens/request"), Column("input side p95", "tokens/request")),
                   extra_values=lambda i: (count(r.by_tenant[i].input_tokens_p50),
                                           count(r.by_tenant[i].input_tokens_p95))),
        _breakdown("by_tag", "By tag", ("tag",), [((x.tag,), x.usage, x.cost_share) for x in r.by_tag], hits=True),
        _breakdown("by_workload", "By workload", ("workload", "from input side"),
                   [((WORKLOAD_NAMES.get(x.workload, x.workload), f"{x.min_input_tokens:,} tokens"), x.usage,
                     x.cost_share) for x in r.by_workload], hits=True),
        _breakdown("by_tag_workload", "By tag and workload", ("tag", "workload"),
                   [((x.tag, WORKLOAD_NAMES.get(x.workload, x.workload or "-")), x.usage, x.cost_share)
                    for x in r.by_tag_workload]),
        _daily(r),
        _what_if(r),
        _self_hosting(r.self_hosting),
        _assumptions(r.self_hosting),
    ]
    return {table.key: table for table in tables}


def _by_model(r: Report) -> Table:
    table = _breakdown("by_model", "By model and tier", ("model", "tier", "upstream"),
                       [((x.model, x.tier or "-", x.upstream), x.usage, x.cost_share) for x in r.by_model])
    cost = len(table.columns) - 2
    unpriced = set(r.unpriced_models)
    # A model with no price has an unknown cost, not a zero one.
    rows = tuple((*row[:cost], "unpriced", *row[cost + 1:]) if x.model in unpriced and not x.usage.cost_units
                 else row for x, row in zip(r.by_model, table.rows, strict=True))
    return Table(table.key, table.title, table.columns, rows, table.total,
                 note="Unpriced models are left out of the costs." if unpriced else "")


def _daily(r: Report) -> Table:
    # SPEC: a month in progress lists its days up to today (the report's local day).
    today = r.generated_at.astimezone(ZoneInfo(r.timezone)).date()
    days = [d for d in r.daily if r.forecast.month_complete or d.date <= today]
    columns = (_label("date"), *_USAGE[:6])
    rows = tuple((d.date.isoformat(), *_usage(d.usage, 0.0)[:6]) for d in days)
    whole = _sum([d.usage for d in days])
    return Table("daily", "Daily", columns, rows, ("Total", *_usage(whole, 0.0)[:6]) if rows else None,
                 note=f"Local days in {r.timezone}" + ("." if r.forecast.month_complete else ", up to today."))


def _what_if(r: Report) -> Table:
    billed, w = r.totals.usage.cost_units, r.what_if
    scenarios: tuple[tuple[str, int], ...] = (
        ("as billed", billed), ("every model at its standard tier", w.all_standard_units),
        ("every model at its highspeed tier, where it has one", w.all_highspeed_units),
        ("without cache: cached tokens billed as input", w.without_cache_units))
    if r.reprice is not None:
        scenarios += ((f"at the prices in force at {r.reprice.at:%Y-%m-%d %H:%M} UTC", r.reprice.cost_units),)

    def change(units: int) -> str:
        diff = units - billed
        return ("+" if diff > 0 else "-" if diff < 0 else "") + money(abs(diff))

    columns = (_label("scenario"), Column("cost", "USD"), Column("change vs as billed", "USD"))
    return Table("what_if", "What if", columns,
                 tuple((name, money(units), change(units)) for name, units in scenarios),
                 note="The month's own tokens repriced; self-hosted upstreams left out of the what-ifs.")


def _self_hosting(sh: SelfHosting) -> Table:
    rows = (("API cost this month", money(sh.api_cost_units), "USD"),
            ("API tokens this month", count(sh.api_tokens), "tokens"),
            ("self-hosting cost", money(sh.monthly_cost_units), "USD/month"),
            ("break-even volume", count(sh.breakeven_monthly_tokens), "tokens/month"),
            ("break-even as a multiple of this month", f"{sh.volume_multiple_to_breakeven:,.1f}x", ""),
            ("peak hour load", f"{sh.peak_hour_tokens_per_s:,.1f}", "tokens/s"),
            ("peak hour fits the nodes", "yes" if sh.peak_fits else "no", ""),
            ("node utilisation", percent(sh.utilisation), "%"))
    return Table("self_hosting", "Self-hosting against the API",
                 (_label("measure"), Column("value"), Column("unit", numeric=False)), rows)


_ASSUMPTION_NAMES = {
    "nodes": ("nodes", "count"), "node_capex_usd": ("capital cost per node", "USD"),
    "amortization_months": ("amortisation", "months"), "power_kw_per_node": ("power per node", "kW"),
    "usd_per_kwh": ("electricity", "USD/kWh"), "ops_usd_per_month": ("operations", "USD/month"),
    "node_prefill_tokens_per_s": ("prefill per node", "tokens/s"),
    "node_decode_tokens_per_s": ("decode per node", "tokens/s"),
}


def _assumptions(sh: SelfHosting) -> Table:
    rows = []
    for a in sh.assumptions:
        name, unit = _ASSUMPTION_NAMES.get(a.name, (a.name, ""))
        rows.append((name, _plain(a.value), unit, a.source))
    return Table("assumptions", "Self-hosting assumptions",
                 (_label("assumption"), Column("value"), Column("unit", numeric=False),
                  Column("source", numeric=False, prose=True)),
                 tuple(rows), note="Set in llmmeter.toml [selfhost]; every value shows where it comes from.")


def _plain(value: str) -> str:
    """An assumption's exact value with thousands separators: 600000 -> 600,000."""
    try:
        return f"{Decimal(value):,}"
    except InvalidOperation:
        return value
