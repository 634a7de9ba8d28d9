"""The report's numbers, from the database's hourly sums (SPEC "Monthly report").

The database groups the hourly rollup twice: per UTC hour, model, tier, upstream and band
(what local days and hours, bands, what-ifs, forecast and break-even need) and per tenant,
tag and workload (the attribution breakdowns, which need no hour). Python folds those few
thousand rows once into a typed `Report` that every format renders; how many requests the
month holds does not change their number. Money stays in integer 10^-10 USD.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Context, Decimal, localcontext
from zoneinfo import ZoneInfo

from pricing import PriceBook
from pricing.calculator import Rates, rates
from pricing.model import Price
from proxy.errors import ConfigError
from proxy.ledger.store import HourlyRow, Store
from proxy.protocol.names import WORKLOADS
from proxy.report.alternatives import alternatives_for, cheapest_provider
from proxy.report.alternatives import available as alternatives_available
from proxy.report.breakeven import self_hosting
from proxy.report.budgets import budget_rows
from proxy.report.curve import api_traffic, cost_curve
from proxy.report.decision import decision
from proxy.report.groups import total, usage
from proxy.report.load import load_by_minute
from proxy.report.model import (
    BandRow,
    Day,
    Forecast,
    Hour,
    ModelRow,
    Report,
    Reprice,
    SpeedRow,
    TagRow,
    TagWorkloadRow,
    TenantRow,
    Totals,
    Usage,
    WhatIf,
    WorkloadRow,
)
from proxy.report.nodes import nodes_needed, profiles
from proxy.report.unpriced import unpriced_estimated
from proxy.settings import Budget, SelfHost
from proxy.times import utc

# The two groupings of the rollup the report reads (store.grouped_rows).
BY_HOUR = ("hour", "model", "unpriced_model", "tier", "upstream", "metered", "price_band")
BY_ATTRIBUTION = ("tenant", "tag", "workload", "metered")
_WORKLOAD_WORDS = {"short": "short", "medium": "medium", "long": "long-document", "very_long": "very-long-document"}


@dataclass(frozen=True)
class ReportInput:
    month: str  # YYYY-MM
    tz: ZoneInfo
    book: PriceBook
    selfhost: SelfHost
    workload_bounds: tuple[int, int, int]  # medium, long, very_long
    self_hosted_upstreams: frozenset[str] = frozenset()
    tenant: str | None = None
    reprice_at: datetime | None = None
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    budgets: tuple[Budget, ...] = ()  # the config's [[budget]] tables, for the budgets section


def month_range(month: str, tz: ZoneInfo) -> tuple[datetime, datetime]:
    """[first local midnight of the month, first of the next) as aware datetimes."""
    try:
        first = datetime.strptime(month, "%Y-%m").date()
    except ValueError:
        raise ConfigError(f"--month {month!r}: use YYYY-MM, e.g. 2026-11") from None
    following = (first + timedelta(days=32)).replace(day=1)
    return (datetime(first.year, first.month, 1, tzinfo=tz),
            datetime(following.year, following.month, 1, tzinfo=tz))


def build_report(store: Store, inp: ReportInput) -> Report:
    start, end = month_range(inp.month, inp.tz)
    rows = store.grouped_rows(start, end, inp.tenant, BY_HOUR)
    attributed = store.grouped_rows(start, end, inp.tenant, BY_ATTRIBUTION)
    whole = total(rows)
    units = whole.cost_units
    estimated = sum(row.estimated for row in rows)
    percentiles = store.input_side_percentiles(start, end, inp.tenant, (50, 95))
    by_workload = _workloads(attributed, inp.workload_bounds, units)
    hourly = _hourly(rows, inp.tz)
    reprice = None
    if inp.reprice_at is not None:
        at = inp.reprice_at
        reprice = Reprice(at=utc(at), cost_units=sum(Repricer(inp.book)(row, row.tier, at) for row in rows))
    load = load_by_minute(store, start, end, inp.now, inp.tz, inp.tenant)
    needs = nodes_needed(load, profiles(inp.selfhost))
    api_units, api_tokens = api_traffic(rows, inp.self_hosted_upstreams)
    curve = cost_curve(load, needs, inp.selfhost, api_units, api_tokens)
    by_model = tuple(ModelRow(m, t, u, s, share) for (m, t, u), s, share
                     in _by(rows, lambda g: (g.model, g.tier, g.upstream), units, metered_only=True))
    # The same traffic at other providers, priced at the month's end (or now, in a month in progress).
    elsewhere = alternatives_for(by_model, inp.selfhost.equivalents, inp.self_hosted_upstreams,
                                 min(end, inp.now).astimezone(UTC))
    return Report(
        month=inp.month, timezone=inp.tz.key, tenant=inp.tenant, generated_at=utc(inp.now),
        totals=Totals(whole, estimated, sum(row.unpriced for row in rows)),
        cache_hit_rate=whole.cache_hit_rate,
        estimated_share=_share(estimated, whole.requests),
        unpriced_models=tuple(sorted({row.model for row in rows if row.unpriced and row.model})),
        by_model=by_model,
        by_tenant=tuple(TenantRow(t, s, share, *percentiles.get(t, [0, 0]))
                        for (t,), s, share in _by(attributed, lambda g: (g.tenant,), units)),
        by_tag=tuple(TagRow(t, s, share)
                     for (t,), s, share in _by(attributed, lambda g: (g.tag or "untagged",), units,
                                               metered_only=True)),
        by_workload=by_workload,
        by_tag_workload=tuple(TagWorkloadRow(t, w, s, share) for (t, w), s, share
                              in _by(attributed, lambda g: (g.tag or "untagged", g.workload), units,
                                     metered_only=True)),
        by_band=_bands(rows, units),
        workload_summary=workload_summary(by_workload),
        daily=_daily(rows, start, end, inp.tz),
        hourly_profile=hourly,
        peak_to_offpeak_ratio=peak_to_offpeak([h.tokens for h in hourly]),
        speed=_speed(store, start, end, inp.tenant),
        forecast=_forecast(whole, start, end, inp.now),
        what_if=_what_if(rows, inp),
        reprice=reprice,
        self_hosting=self_hosting(rows, inp.selfhost, inp.self_hosted_upstreams, start, end, inp.now),
        budgets=budget_rows(store, inp.budgets, start, end, inp.now, inp.tenant),
        unpriced_estimated=unpriced_estimated(store, inp.book, start, end, inp.tenant,
                                              any(row.unpriced or row.estimated for row in rows)),
        load_by_minute=load, nodes=needs,
        slo=tuple(store.slo(start, end, inp.tenant)),
        cost_curve=curve,
        decision=decision(api_units, load, needs, inp.selfhost, cheapest_provider(elsewhere, api_units)),
        pruned_months=tuple(store.pruned_months(start, end)),
        pruned_before_histograms=store.histograms_short(start, end),
        alternatives=elsewhere,
        alternatives_priced=alternatives_available(),
    )


def _bands(rows: list[HourlyRow], total_units: int) -> tuple[BandRow, ...]:
    """Priced models' requests per model, tier and band, by model and tier, then band."""
    sums: dict[tuple[str, str, int], Usage] = {}
    for row in rows:
        if row.metered and not row.unpriced_model:
            k = (row.model, row.tier, row.price_band)
            sums[k] = sums.get(k, Usage()) + usage(row)
    return tuple(BandRow(m, t, b, s, _share(s.cost_units, total_units)) for (m, t, b), s in sorted(sums.items()))


def _speed(store: Store, start: datetime, end: datetime, tenant: str | None) -> tuple[SpeedRow, ...]:
    """The store's speed rows (streamed requests with upstream usage), the busiest first."""
    found = store.speed(start, end, tenant)
    rows = (SpeedRow(x.model, x.tier, x.requests, x.output_tokens_per_s_p50, x.ttft_ms_p50, x.ttft_ms_p95)
            for x in found)
    return tuple(sorted(rows, key=lambda x: (-x.requests, x.model, x.tier)))


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def _by(rows: list[HourlyRow], key: Callable[[HourlyRow], tuple[str, ...]], total_units: int,
        metered_only: bool = False) -> list[tuple[tuple[str, ...], Usage, float]]:
    """(key, sums, share of cost) per key, the costliest first."""
    sums: dict[tuple[str, ...], Usage] = {}
    for row in rows:
        if not metered_only or row.metered:
            k = key(row)
            sums[k] = sums.get(k, Usage()) + usage(row)
    ordered = sorted(sums.items(), key=lambda kv: (-kv[1].cost_units, kv[0]))
    return [(k, s, _share(s.cost_units, total_units)) for k, s in ordered]


def _workloads(rows: list[HourlyRow], bounds: tuple[int, int, int], total_units: int) -> tuple[WorkloadRow, ...]:
    sums = dict.fromkeys(WORKLOADS, Usage())
    for row in rows:
        if row.workload in sums:
            sums[row.workload] += usage(row)
    mins = dict(zip(WORKLOADS, (0, *bounds), strict=True))
    return tuple(WorkloadRow(w, mins[w], s, _share(s.cost_units, total_units)) for w, s in sums.items())


def workload_summary(rows: tuple[WorkloadRow, ...]) -> str:
    """The decision in plain words: what share of calls and of cost each long class has."""
    calls = sum(r.usage.requests for r in rows)
    if not calls:
        return "No metered requests this month."
    parts = [f"{_WORKLOAD_WORDS[r.workload]} requests are {r.usage.requests / calls:.0%} of calls and "
             f"{r.cost_share:.0%} of cost" for r in rows if r.usage.requests]
    return "; ".join(parts) + "."


def _daily(rows: list[HourlyRow], start: datetime, end: datetime, tz: ZoneInfo) -> tuple[Day, ...]:
    days: dict[date, Usage] = {}
    split: dict[date, dict[str, int]] = {}
    d = start.date()
    while d < end.date():
        days[d], split[d] = Usage(), {}
        d += timedelta(days=1)
    for row in rows:
        local = row.start.astimezone(tz).date()
        if local in days:
            days[local] += usage(row)
            if row.cost_units:
                key = f"{row.model}/{row.tier}"
                split[local][key] = split[local].get(key, 0) + row.cost_units
    return tuple(Day(d, s, tuple(sorted(split[d].items()))) for d, s in days.items())


def _hourly(rows: list[HourlyRow], tz: ZoneInfo) -> tuple[Hour, ...]:
    # Bins by the local hour the UTC hour starts in (exact for whole-hour offsets).
    requests, tokens = [0] * 24, [0] * 24
    for row in rows:
        h = row.start.astimezone(tz).hour
        requests[h] += row.requests
        tokens[h] += usage(row).billed_tokens
    return tuple(Hour(h, requests[h], tokens[h]) for h in range(24))


def peak_to_offpeak(tokens_by_hour: list[int]) -> float:
    """Mean tokens of the 4 busiest hours over the mean of the 12 quietest (0 when those are 0)."""
    ordered = sorted(tokens_by_hour, reverse=True)
    quiet = sum(ordered[-12:]) / 12
    return (sum(ordered[:4]) / 4) / quiet if quiet else 0.0


def _forecast(whole: Usage, start: datetime, end: datetime, now: datetime) -> Forecast:
    if now >= end:
        return Forecast(True, whole.cost_units, whole.billed_tokens, "the month is complete: actual totals")
    days = (end - start) / timedelta(days=1)
    elapsed = max((now - start) / timedelta(days=1), 0.0)
    if elapsed <= 0:
        return Forecast(False, 0, 0, "the month has not started")
    with localcontext(Context(prec=60)):  # enough digits for any month the ledger can hold
        factor = Decimal(days) / Decimal(elapsed)
        units = (Decimal(whole.cost_units) * factor).quantize(Decimal(1), ROUND_HALF_EVEN)
    return Forecast(False, int(units), int(whole.billed_tokens * factor),
                    f"run-rate: {elapsed:.2f} of {days:.0f} days elapsed, totals so far x {float(factor):.3f}")


class Repricer:
    """Prices hourly rows with the tables in force at a given time.

    A cost is a token count times an integer unit price per token, so pricing the month's
    few thousand rows needs only the few distinct prices, looked up once per entry and band.
    """

    def __init__(self, book: PriceBook) -> None:
        self.book = book
        self._levels: dict[tuple[Price, int], Rates] = {}

    def has_tier(self, row: HourlyRow, tier: str, at: datetime) -> bool:
        """Whether the row's model has an entry of exactly this tier in force at `at`."""
        found = self.book.resolve(row.model, tier, at, upstream=row.upstream or None)
        return found is not None and not found.tier_fallback

    def __call__(self, row: HourlyRow, tier: str, at: datetime, fold_cache: bool = False) -> int:
        if row.unpriced_model or not row.metered:
            return 0
        found = self.book.resolve(row.model, tier or "standard", at, upstream=row.upstream or None)
        if found is None:
            return 0
        r = self._level(found.price, row.price_band)
        if fold_cache:  # as if nothing were cached: cache tokens billed as input
            return r.units(input=usage(row).input_side, output=row.output_tokens,
                           web_search_calls=row.web_search_calls)
        return r.units(input=row.input_tokens, cache_read=row.cache_read_tokens, cache_write=row.cache_write_tokens,
                       cache_write_1h=row.cache_write_1h_tokens, output=row.output_tokens,
                       web_search_calls=row.web_search_calls)

    def _level(self, price: Price, band: int) -> Rates:
        """The entry's prices at the band the row was billed in. A row's requests all had more
        input-side tokens than its band's threshold, so the entry's highest level at or below
        that threshold applies: exact when the entry's bands are those the row was priced with,
        as they are for every repricing at the row's own entry. 1-hour writes with no price of
        their own cost cache_write's, and calls with no fee price cost 0, as the calculator has it."""
        key = (price, band)
        level = self._levels.get(key)
        if level is None:
            level = self._levels[key] = next(x for x in reversed(rates(price)) if x.above <= band)  # base at 0
        return level


def _what_if(rows: list[HourlyRow], inp: ReportInput) -> WhatIf:
    api = [row for row in rows if row.upstream not in inp.self_hosted_upstreams]
    priced = Repricer(inp.book)
    fastest = {m: "highspeed" if "highspeed" in inp.book.tiers(m) else "standard" for m in {r.model for r in api}}

    def at_tier_else_billed(tier: str) -> int:
        return sum(priced(r, tier, r.start) if priced.has_tier(r, tier, r.start) else r.cost_units for r in api)

    # Each row is repriced with the tables in force at its own hour.
    return WhatIf(all_standard_units=sum(priced(r, "standard", r.start) for r in api),
                  all_highspeed_units=sum(priced(r, fastest[r.model], r.start) for r in api),
                  without_cache_units=sum(priced(r, r.tier, r.start, fold_cache=True) for r in api),
                  all_batch_units=at_tier_else_billed("batch"),
                  all_flex_units=at_tier_else_billed("flex"))
