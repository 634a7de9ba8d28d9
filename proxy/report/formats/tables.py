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
from proxy.report.formats.speeds import MIN_REQUESTS, millis, rate
from proxy.report.model import BudgetRow, Report, SelfHosting, SpeedRow, UnpricedEstimated, Usage
from proxy.report.numbers import UNPRICED, cost, count, counted, money, percent

WORKLOAD_NAMES = {w: w.replace("_", " ") for w in WORKLOADS}  # "very_long" reads "very long"


@dataclass(frozen=True, slots=True)
class Column:
    title: str
    unit: str = ""  # shown under or after the title: tokens, USD, %
    numeric: bool = True
    prose: bool = False  # a sentence that may wrap, not a name or a number


@dataclass(frozen=True, slots=True)
class Cell:
    """A figure that says where it came from: `href` is a section or row of the same report
    (`#...`) or the source's own address; `anchor` names this cell's row for such links."""

    text: str
    href: str | None = None
    anchor: str | None = None

    def __str__(self) -> str:
        return self.text


Value = str | Cell


def text(v: Value) -> str:
    return v.text if isinstance(v, Cell) else v


@dataclass(frozen=True, slots=True)
class Table:
    key: str  # the report section it shows, e.g. by_model; the section's anchor in Markdown and HTML
    title: str
    columns: tuple[Column, ...]
    rows: tuple[tuple[Value, ...], ...]
    total: tuple[str, ...] | None = None
    note: str = ""
    empty: str = "No requests this month."  # shown in place of rows when there are none


def _label(title: str) -> Column:
    return Column(title, numeric=False)


_HITS = Column("cache-hit rate", "%")
NO_PROVIDER_COST = "-"  # no request of the row reported a provider cost: unknown, not zero


@dataclass(frozen=True, slots=True)
class UsageColumns:
    """The usage columns a report's tables show: the version-3 ones only when the month has any
    (1-hour cache writes, web search calls and their fees, a provider's own cost)."""

    one_hour: bool = False
    fees: bool = False
    provider: bool = False

    @classmethod
    def of(cls, whole: Usage) -> UsageColumns:
        return cls(one_hour=bool(whole.cache_write_1h_tokens), fees=bool(whole.web_search_calls or whole.fee_units),
                   provider=bool(whole.provider_costed))

    def columns(self, share: bool = True, reasoning: bool = False) -> tuple[Column, ...]:
        return (Column("requests", "count"), Column("input", "tokens"), Column("cache read", "tokens"),
                Column("cache write", "tokens"),
                *((Column("cache write 1h", "tokens"),) if self.one_hour else ()),
                Column("output", "tokens"), *((Column("reasoning", "tokens"),) if reasoning else ()),
                *((Column("web search", "calls"),) if self.fees else ()),
                Column("cost", "USD"), *((Column("fees in cost", "USD"),) if self.fees else ()),
                *((Column("provider cost", "USD"),) if self.provider else ()),
                *((Column("share of cost", "%"),) if share else ()))

    def values(self, u: Usage, share: float | None = None, reasoning: bool = False) -> tuple[str, ...]:
        provider = u.provider_cost
        return (count(u.requests), count(u.input_tokens), count(u.cache_read_tokens), count(u.cache_write_tokens),
                *((count(u.cache_write_1h_tokens),) if self.one_hour else ()),
                count(u.output_tokens), *((count(u.reasoning_tokens),) if reasoning else ()),
                *((count(u.web_search_calls),) if self.fees else ()),
                cost(u.cost_units, u.unpriced_requests), *((money(u.fee_units),) if self.fees else ()),
                *((NO_PROVIDER_COST if provider is None else money(provider),) if self.provider else ()),
                *((share_text(u, share),) if share is not None else ()))

    def note(self) -> str:
        notes = []
        if self.fees:
            notes.append("Fees (web search calls) are part of the cost.")
        if self.provider:
            notes.append("Provider cost is what the upstream itself reported (OpenRouter, xAI), over the "
                         f"requests that reported one; {NO_PROVIDER_COST} where none did.")
        return " ".join(notes)


def share_text(u: Usage, share: float) -> str:
    """A row's share of the priced cost: unknown (`-`) when none of its cost is known, a lower
    bound when some of its requests are unpriced."""
    if not u.cost_known:
        return NO_PROVIDER_COST
    return ("≥ " if u.unpriced_requests else "") + percent(share)


def _sum(usages: Sequence[Usage]) -> Usage:
    return sum(usages, Usage())


def _breakdown(cols: UsageColumns, key: str, title: str, labels: Sequence[str],
               rows: Sequence[tuple[Sequence[str], Usage, float]], hits: bool = False, extra: Sequence[Column] = (),
               extra_values: Callable[[int], Sequence[str]] = lambda i: ()) -> Table:
    """Label columns, the usage columns, then `extra` columns; a totals row summing the rows shown."""
    columns = (*map(_label, labels), *cols.columns(), *((_HITS,) if hits else ()), *extra)
    body = tuple((*names, *cols.values(u, share), *((percent(u.cache_hit_rate),) if hits else ()),
                  *extra_values(i)) for i, (names, u, share) in enumerate(rows))
    whole = _sum([u for _, u, _ in rows])
    total = ("Total", *([""] * (len(labels) - 1)), *cols.values(whole, sum(s for _, _, s in rows)),
             *((percent(whole.cache_hit_rate),) if hits else ()), *([""] * len(extra)))
    return Table(key, title, columns, body, total if rows else None)


def report_tables(r: Report) -> dict[str, Table]:
    """Every table of the report, by section key."""
    t = r.totals.usage
    cols = UsageColumns.of(t)
    tables = [
        Table("totals", "Totals", cols.columns(share=False, reasoning=True),
              (cols.values(t, reasoning=True),),
              note=" ".join(("Reasoning tokens are part of output tokens, and billed as output.", cols.note()))
              .strip()),
        _by_model(r, cols),
        _breakdown(cols, "by_tenant", "By tenant", ("tenant",),
                   [((x.tenant,), x.usage, x.cost_share) for x in r.by_tenant],
                   extra=(Column("input side p50", "tokens/request"), Column("input side p95", "tokens/request")),
                   extra_values=lambda i: (count(r.by_tenant[i].input_tokens_p50),
                                           count(r.by_tenant[i].input_tokens_p95))),
        _breakdown(cols, "by_tag", "By tag", ("tag",), [((x.tag,), x.usage, x.cost_share) for x in r.by_tag],
                   hits=True),
        _breakdown(cols, "by_workload", "By workload", ("workload", "from input side"),
                   [((WORKLOAD_NAMES.get(x.workload, x.workload), f"{x.min_input_tokens:,} tokens"), x.usage,
                     x.cost_share) for x in r.by_workload], hits=True),
        _breakdown(cols, "by_tag_workload", "By tag and workload", ("tag", "workload"),
                   [((x.tag, WORKLOAD_NAMES.get(x.workload, x.workload or "-")), x.usage, x.cost_share)
                    for x in r.by_tag_workload]),
        _by_band(r, cols),
        _speed(r),
        _budgets(r.budgets),
        _unpriced_estimated(r.unpriced_estimated),
        _daily(r, cols),
        _what_if(r),
        _self_hosting(r.self_hosting),
        _assumptions(r.self_hosting),
    ]
    return {table.key: table for table in tables}


def _by_model(r: Report, cols: UsageColumns) -> Table:
    table = _breakdown(cols, "by_model", "By model and tier", ("model", "tier", "upstream"),
                       [((x.model, x.tier or "-", x.upstream), x.usage, x.cost_share) for x in r.by_model])
    return Table(table.key, table.title, table.columns, table.rows, table.total,
                 note=UNPRICED_NOTE if r.totals.unpriced_requests else "")


UNPRICED_NOTE = (f"Requests to models with no price are left out of the costs: a cost reads '{UNPRICED}' when "
                 f"none of its requests had a price, '≥ $X, N {UNPRICED}' when N of them had none, and its share "
                 "of cost is then unknown (-) or a lower bound (≥).")


def peak_to_offpeak_words(r: Report) -> str:
    """The peak-to-off-peak ratio in words: a number only when the 12 quietest hours had traffic, since
    0.00 would read as "no peak" for a month whose traffic all fell in a few hours."""
    if r.peak_to_offpeak_ratio:
        return (f"peak-to-off-peak ratio {r.peak_to_offpeak_ratio:.2f} (mean tokens of the 4 busiest hours over "
                "the mean of the 12 quietest)")
    if any(h.tokens for h in r.hourly_profile):
        return "all traffic in the busiest hours (the 12 quietest hours had none, so there is no ratio)"
    return "no traffic, so no peak-to-off-peak ratio"


def band_name(above: int) -> str:
    return f"above {above:,} tokens" if above else "base"


def _by_band(r: Report, cols: UsageColumns) -> Table:
    table = _breakdown(cols, "by_band", "By long-context band", ("model", "tier", "band"),
                       [((x.model, x.tier or "-", band_name(x.above_input_tokens)), x.usage, x.cost_share)
                        for x in r.by_band])
    note = ("A band is chosen per request on its whole input side (input, cache reads and writes); the whole "
            "request is priced at it. 'base': below every band of its price entry.")
    return Table(table.key, table.title, table.columns, table.rows, table.total, note=note)


def _speed(r: Report) -> Table:
    """Speed beside what each model and tier cost per million tokens: what a faster tier's premium bought."""
    per_model: dict[tuple[str, str], Usage] = {}
    for x in r.by_model:
        per_model[(x.model, x.tier)] = per_model.get((x.model, x.tier), Usage()) + x.usage

    def per_million(model: str, tier: str) -> str:
        u = per_model.get((model, tier))
        if u is None or not u.billed_tokens or not u.cost_units:
            return "-"
        return money(u.cost_units * 10**6 // u.billed_tokens)

    columns = (_label("model"), _label("tier"), Column("streamed requests", "count"),
               Column("output speed p50", "tokens/s"), Column("time to first token p50", "ms"),
               Column("time to first token p95", "ms"), Column("cost per million tokens", "USD"))
    # The output speed rests on the requests that ran past their first token: the slo table counts
    # them per band over the same requests (streamed, with the upstream's usage and a time to first token).
    timed: dict[tuple[str, str], int] = {}
    for s in r.slo:
        timed[(s.model, s.tier)] = timed.get((s.model, s.tier), 0) + s.timed_requests

    def speed(x: SpeedRow) -> str:
        n = min(x.requests, timed.get((x.model, x.tier), 0))
        return "-" if not n else rate(x.output_tokens_per_s_p50, n, 1)

    rows = tuple((x.model, x.tier or "-", count(x.requests), speed(x),
                  millis(x.ttft_ms_p50, x.requests), millis(x.ttft_ms_p95, x.requests), per_million(x.model, x.tier))
                 for x in r.speed)
    return Table("speed", "Speed by model and tier", columns, rows,
                 note="Streamed requests with usage from the upstream. Output speed: output tokens over the "
                      "time after the first token; time to first token from the request's arrival. The cost per "
                      "million tokens (all billing categories) is the month's, so a faster tier's premium can be "
                      "weighed against the speed it bought. A speed over fewer than "
                      f"{MIN_REQUESTS} requests is not shown as a figure, nor one with no request that ran a "
                      "millisecond past its first token (-).",
                 empty="No streamed requests with usage from the upstream this month.")


def budget_period(x: BudgetRow) -> str:
    """The period in the budget's own zone: `2026-11` for a month, `2026-11-03` for a day."""
    lo = x.period_start.astimezone(ZoneInfo(x.tz))
    days = (x.period_end - x.period_start).days
    return f"{lo:%Y-%m}" if days >= 28 else f"{lo:%Y-%m-%d}"


def _budgets(rows: tuple[BudgetRow, ...]) -> Table:
    columns = (_label("budget"), _label("period"), _label("time zone"), _label("mode"), Column("limit", "USD"),
               Column("spent", "USD"), Column("used", "%"), Column("rejected requests", "count"),
               Column("rejected, at most", "USD"))
    body = tuple((x.name, budget_period(x) + ("" if x.complete else " (so far)"), x.tz, x.mode,
                  money(x.limit_units), money(x.spent_units),
                  percent(x.spent_units / x.limit_units if x.limit_units else 0.0), count(x.rejected_requests),
                  money(x.rejected_units)) for x in rows)
    return Table("budgets", "Budgets", columns, body,
                 note="Each [[budget]] period that overlaps the month, whole, in the budget's own time zone. Spent "
                      "is the ledger's priced cost of the requests the budget matches in the period. Rejected: "
                      "requests an enforced budget refused (HTTP 429); what they would have cost is the sum of "
                      "their reservations, each the request's worst case, so it is an upper bound (a refused "
                      "request to a model with no price adds nothing to it).",
                 empty="No [[budget]] in the configuration.")


NO_NEAREST = "none known"  # an unpriced model with no price of its own or of its family


def _unpriced_estimated(u: UnpricedEstimated) -> Table:
    """Requests with no price or estimated usage, per model, tier and upstream, and what they would
    cost at the nearest known price (proxy/report/unpriced.py)."""
    columns = (_label("model"), _label("tier"), _label("upstream"), Column("requests", "count"),
               Column("unpriced", "requests"), Column("estimated", "requests"), Column("tokens", "all types"),
               Column("in the report's cost", "USD"), _label("nearest known price"),
               Column("cost at the nearest price", "USD"))

    def nearest(model: str | None, tier: str | None, unpriced: int) -> str:
        if not unpriced:
            return "own price"
        return NO_NEAREST if model is None else f"{model} / {tier}"

    rows = tuple((x.model or "-", x.tier or "-", x.upstream, count(x.requests), count(x.unpriced_requests),
                  count(x.estimated_requests), count(x.tokens),
                  UNPRICED if x.unpriced_requests and not x.cost_units else money(x.cost_units),
                  nearest(x.nearest_model, x.nearest_tier, x.unpriced_requests),
                  "-" if x.cost_at_nearest_units is None else money(x.cost_at_nearest_units)) for x in u.models)
    total = ("Total", "", "", count(u.requests), count(u.unpriced_requests), count(u.estimated_requests),
             count(u.tokens), money(u.estimated_cost_units), "", money(u.cost_at_nearest_units))
    notes = ["Unpriced requests had no price when they were written: their cost is not in the report's totals. "
             "The nearest known price is their model's own entry if the price tables know it now, else the entry "
             "of the model whose name the unpriced one extends (claude-sonnet-4-5-20991231: claude-sonnet-4-5), at "
             "its base prices; else none, and they are left out of the cost at the nearest price. "
             "Estimated requests are priced (their cost is in the totals) from usage llmmeter counted itself, "
             "because the upstream reported none."]
    if u.unpriced_without_price_requests:
        n = u.unpriced_without_price_requests
        notes.append(f"{counted(n, 'unpriced request')} {'has' if n == 1 else 'have'} no known price at all.")
    return Table("unpriced_estimated", "Unpriced and estimated", columns, rows, total if rows else None,
                 note=" ".join(notes),
                 empty="No unpriced and no estimated requests this month: every cost comes from a price entry and "
                       "the upstream's own usage.")


def _daily(r: Report, cols: UsageColumns) -> Table:
    # SPEC: a month in progress lists its days up to today (the report's local day).
    today = r.generated_at.astimezone(ZoneInfo(r.timezone)).date()
    days = [d for d in r.daily if r.forecast.month_complete or d.date <= today]
    columns = (_label("date"), *cols.columns(share=False))
    rows = tuple((d.date.isoformat(), *cols.values(d.usage)) for d in days)
    whole = _sum([d.usage for d in days])
    return Table("daily", "Daily", columns, rows, ("Total", *cols.values(whole)) if rows else None,
                 note=f"Local days in {r.timezone}" + ("." if r.forecast.month_complete else ", up to today."))


def _what_if(r: Report) -> Table:
    billed, w = r.totals.usage.cost_units, r.what_if
    scenarios: tuple[tuple[str, int], ...] = (
        ("as billed", billed), ("every model at its standard tier", w.all_standard_units),
        ("every model at its highspeed tier, where it has one", w.all_highspeed_units),
        ("every model at its batch tier, where it has one (else as billed)", w.all_batch_units),
        ("every model at its flex tier, where it has one (else as billed)", w.all_flex_units),
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
