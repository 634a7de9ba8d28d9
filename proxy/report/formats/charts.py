"""The HTML report's charts, each drawn from the built Report with labelled axes and units."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from pricing import usd
from proxy.report.formats.svg import PALETTE, Axis, Line, Mark, Series, bar_chart, line_chart, nice_ticks
from proxy.report.formats.tables import WORKLOAD_NAMES, peak_to_offpeak_words
from proxy.report.model import Report
from proxy.report.numbers import compact, count, counted, money, money_compact, money_decimal, money_ticks, percent


@dataclass(frozen=True, slots=True)
class Chart:
    key: str
    title: str
    svg: str
    legend: tuple[tuple[str, str], ...]  # (name, colour)
    note: str = ""


def _dollars(units: int) -> float:
    return float(usd(units))


def _exact_usd(v: float) -> str:  # a hover text: to the cent, or the digits a tiny amount needs
    return money_decimal(Decimal(repr(v)))


def _exact_tokens(v: float) -> str:
    return f"{count(round(v))} tokens"


def _compact_ticks(values: Sequence[float]) -> list[str]:
    return [compact(v) for v in values]


USD_PER_DAY = Axis("cost (USD per day)", _exact_usd, money_ticks)
USD_PER_MONTH = Axis("cost (USD per month)", _exact_usd, money_ticks)
TOKENS_PER_DAY = Axis("tokens per day", _exact_tokens, _compact_ticks)


def _day_names(r: Report) -> tuple[list[str], list[str]]:
    return [str(d.date.day) for d in r.daily], [d.date.strftime("%a %d %b %Y") for d in r.daily]


def daily_cost(r: Report) -> Chart:
    keys = sorted({k for d in r.daily for k, _ in d.cost_by_model_tier})
    by_day = [dict(d.cost_by_model_tier) for d in r.daily]
    series = [Series(k, [_dollars(day.get(k, 0)) for day in by_day], PALETTE[i % len(PALETTE)])
              for i, k in enumerate(keys)]
    short, full = _day_names(r)
    title = "Cost per day, by model and tier"
    svg = bar_chart("daily-cost", title, short, series, USD_PER_DAY, f"day of {_month_name(r)} ({r.timezone})",
                    hover_names=full)
    return Chart("daily-cost", title, svg, tuple((s.name, s.color) for s in series),
                 note="" if keys else "No priced requests this month.")


def token_mix(r: Report) -> Chart:
    kinds: tuple[tuple[str, str], ...] = (("input", "input_tokens"), ("cache read", "cache_read_tokens"),
                                          ("cache write", "cache_write_tokens"))
    if r.totals.usage.cache_write_1h_tokens:
        kinds += (("cache write 1h", "cache_write_1h_tokens"),)
    kinds += (("output", "output_tokens"),)
    series = [Series(name, [float(getattr(d.usage, field)) for d in r.daily], PALETTE[i])
              for i, (name, field) in enumerate(kinds)]
    short, full = _day_names(r)
    title = "Tokens per day, by type"
    t = r.totals.usage
    mix = ("The month: " + "; ".join(f"{name} {compact(getattr(t, field))} "
                                     f"({percent(getattr(t, field) / t.billed_tokens)})" for name, field in kinds)
           if t.billed_tokens else "No tokens this month")
    svg = bar_chart("token-mix", title, short, series, TOKENS_PER_DAY, f"day of {_month_name(r)} ({r.timezone})",
                    hover_names=full)
    return Chart("token-mix", title, svg, tuple((s.name, s.color) for s in series), note=f"{mix}.")


def tag_workload(r: Report) -> Chart:
    tags = sorted({x.tag for x in r.by_tag_workload}) or ["untagged"]
    cost = {(x.tag, x.workload): _dollars(x.usage.cost_units) for x in r.by_tag_workload}
    series = [Series(label, [cost.get((t, w), 0.0) for t in tags], PALETTE[i])
              for i, (w, label) in enumerate(WORKLOAD_NAMES.items())]
    title = "Where the money goes: cost by tag and workload"
    svg = bar_chart("tag-workload", title, tags, series, USD_PER_MONTH,
                    "tag (X-LLMMeter-Tag header)")
    return Chart("tag-workload", title, svg, tuple((s.name, s.color) for s in series), note=r.workload_summary)


def hourly(r: Report) -> Chart:
    tokens = [h.tokens for h in r.hourly_profile]
    ranked = sorted(range(24), key=lambda h: tokens[h], reverse=True)
    busy, quiet = set(ranked[:4]), set(ranked[12:])
    groups = (("4 busiest hours", busy, PALETTE[5]), ("12 quietest hours", quiet, PALETTE[7]),
              ("other hours", set(range(24)) - busy - quiet, PALETTE[0]))
    series = [Series(name, [float(tokens[h]) if h in hours else 0.0 for h in range(24)], color)
              for name, hours, color in groups]
    title = "Tokens by local hour of day (the month's total per hour)"
    svg = bar_chart("hourly", title, [f"{h:02d}" for h in range(24)], series,
                    Axis("tokens in the month", _exact_tokens, _compact_ticks),
                    f"hour of day, local time ({r.timezone})",
                    hover_names=[f"{h:02d}:00-{h:02d}:59" for h in range(24)])
    peak = ranked[0]
    note = f"Busiest hour {peak:02d}:00 with {counted(tokens[peak], 'token')}; {peak_to_offpeak_words(r)}."
    return Chart("hourly", title, svg, tuple((name, color) for name, _, color in groups), note=note)


def cache_by_day(r: Report) -> Chart:
    rates = [100.0 * d.usage.cache_hit_rate for d in r.daily]
    short, full = _day_names(r)
    title = "Cache-hit rate per day"
    svg = bar_chart("cache-by-day", title, short, [Series("cache-hit rate", rates, PALETTE[2])],
                    Axis("cache-hit rate (%)", lambda v: f"{v:.0f}%" if v == int(v) else
                         f"{v:.1f}%"), f"day of {_month_name(r)} ({r.timezone})", hover_names=full, top=100.0)
    return Chart("cache-by-day", title, svg, (("cache-hit rate: cache reads ÷ all input-side tokens", PALETTE[2]),),
                 note=f"The month as a whole: {percent(r.cache_hit_rate)}.")


def breakeven(r: Report) -> Chart:
    sh = r.self_hosting
    monthly = _dollars(sh.monthly_cost_units)
    tokens, api = float(sh.api_tokens), _dollars(sh.api_cost_units)
    title = "API against self-hosting, by monthly volume"
    api_name, own_name = "API cost at this month's price per token", f"self-hosting: {money_compact(monthly)}/month"
    x_axis = Axis("tokens per month", _exact_tokens, _compact_ticks)
    if not (tokens and api):
        reach = nice_ticks(max(tokens * 2, 1e9))[-1]
        svg = line_chart("breakeven", title, [Line(own_name, [(0, monthly), (reach, monthly)], PALETTE[1],
                                                   label_at_start=True)], [],
                         x_axis, USD_PER_MONTH, reach, max(monthly * 1.3, 1.0))
        return Chart("breakeven", title, svg, ((own_name, PALETTE[1]),),
                     note="No priced API traffic this month: there is no API cost line to compare with.")
    even = float(sh.breakeven_monthly_tokens)
    reach = nice_ticks(max(even, tokens) * 1.2)[-1]  # the lines run to the axis' last tick
    per_token = api / tokens
    lines = [Line(api_name, [(0, 0), (reach, per_token * reach)], PALETTE[0]),
             Line(own_name, [(0, monthly), (reach, monthly)], PALETTE[1], label_at_start=True)]
    marks = [Mark(tokens, api, f"this month: {compact(tokens)} tokens, {money(sh.api_cost_units)}",
                  f"this month: {count(sh.api_tokens)} tokens cost {money(sh.api_cost_units)} on the API"),
             Mark(even, monthly, f"break-even: {compact(even)} tokens/month",
                  f"break-even: {count(sh.breakeven_monthly_tokens)} tokens a month cost "
                  f"{money(sh.monthly_cost_units)} either way ({sh.volume_multiple_to_breakeven:,.1f}x this month)",
                  color=PALETTE[5])]
    top = max(per_token * reach, monthly) * 1.1
    svg = line_chart("breakeven", title, lines, marks, x_axis, USD_PER_MONTH, reach, top, shade_from=even,
                     shade_labels=("API is cheaper", "self-hosting is cheaper"))
    return Chart("breakeven", title, svg, ((api_name, PALETTE[0]), (own_name, PALETTE[1]),
                                           ("break-even point", PALETTE[5]), ("this month", "#222")),
                 note=sh.summary)


def all_charts(r: Report) -> list[Chart]:
    return [daily_cost(r), token_mix(r), tag_workload(r), hourly(r), cache_by_day(r), breakeven(r)]


def _month_name(r: Report) -> str:
    return r.daily[0].date.strftime("%B %Y") if r.daily else r.month
