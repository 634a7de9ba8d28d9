"""The report's numbers, from the database's hourly sums (SPEC "Monthly report").

The database sums per UTC hour and attribution key; everything else (local days and
hours, what-ifs, forecast, break-even) folds those few thousand rows in Python. Money
stays in integer 10^-10 USD until it is written as an exact decimal string.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Context, Decimal, localcontext
from typing import Any
from zoneinfo import ZoneInfo

from pricing import PriceBook, format_usd
from proxy.ledger.store import Store
from proxy.settings import SelfHost

TOKENS = ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens", "reasoning_tokens")
WORKLOADS = ("short", "medium", "long", "very_long")


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


@dataclass
class _Sums:
    requests: int = 0
    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    estimated: int = 0
    unpriced: int = 0
    cost_units: int = 0

    def add(self, g: _Group) -> None:
        self.requests += g.requests
        self.input_tokens += g.input_tokens
        self.cache_read_tokens += g.cache_read_tokens
        self.cache_write_tokens += g.cache_write_tokens
        self.output_tokens += g.output_tokens
        self.reasoning_tokens += g.reasoning_tokens
        self.estimated += g.estimated
        self.unpriced += g.unpriced
        self.cost_units += g.cost_units

    @property
    def input_side(self) -> int:
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def billed_tokens(self) -> int:  # the four billing categories; reasoning is inside output
        return self.input_side + self.output_tokens

    def tokens(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in TOKENS}

    def cache_hit_rate(self) -> float:
        return self.cache_read_tokens / self.input_side if self.input_side else 0.0


@dataclass
class _Group(_Sums):
    hour: datetime = field(default_factory=lambda: datetime.min.replace(tzinfo=UTC))  # UTC start of the hour
    model: str = ""
    unpriced_model: bool = False
    tier: str = ""
    upstream: str = ""
    tenant: str = ""
    tag: str = ""
    workload: str = ""
    metered: bool = False


def month_range(month: str, tz: ZoneInfo) -> tuple[datetime, datetime]:
    """[first local midnight of the month, first of the next) as aware datetimes."""
    try:
        first = datetime.strptime(month, "%Y-%m").date()
    except ValueError:
        raise ValueError(f"--month {month!r}: use YYYY-MM, e.g. 2026-11") from None
    following = (first + timedelta(days=32)).replace(day=1)
    return (datetime(first.year, first.month, 1, tzinfo=tz),
            datetime(following.year, following.month, 1, tzinfo=tz))


def _groups(rows: Iterable[tuple[Any, ...]]) -> list[_Group]:
    out = []
    for (hour, model, unpriced_model, tier, upstream, tenant, tag, workload, metered, requests,
         inp, cr, cw, outp, reasoning, estimated, unpriced, units) in rows:
        out.append(_Group(
            hour=datetime.fromtimestamp(hour * 3600, UTC), model=model, unpriced_model=bool(unpriced_model),
            tier=tier, upstream=upstream, tenant=tenant, tag=tag, workload=workload, metered=bool(metered),
            requests=int(requests), input_tokens=int(inp), cache_read_tokens=int(cr), cache_write_tokens=int(cw),
            output_tokens=int(outp), reasoning_tokens=int(reasoning), estimated=int(estimated),
            unpriced=int(unpriced), cost_units=int(units)))
    return out


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


_usd = format_usd  # exact dollars from 10^-10 USD units


def build_report(store: Store, inp: ReportInput) -> dict[str, Any]:
    start, end = month_range(inp.month, inp.tz)
    groups = _groups(store.hourly(start, end, inp.tenant))
    total = _Sums()
    for g in groups:
        total.add(g)

    report: dict[str, Any] = {
        "month": inp.month, "timezone": inp.tz.key, "tenant": inp.tenant,
        "generated_at": inp.now.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "totals": {"requests": total.requests, **total.tokens(), "estimated_requests": total.estimated,
                   "unpriced_requests": total.unpriced, "cost_usd": _usd(total.cost_units)},
        "cache_hit_rate": total.cache_hit_rate(),
        "estimated_share": _share(total.estimated, total.requests),
        "unpriced_models": sorted({g.model for g in groups if g.unpriced and g.model}),
    }
    report["by_model"] = _by(groups, lambda g: (g.model, g.tier, g.upstream), ("model", "tier", "upstream"),
                             total.cost_units, metered_only=True)
    by_tenant = _by(groups, lambda g: (g.tenant,), ("tenant",), total.cost_units)
    percentiles = store.input_side_percentiles(start, end, inp.tenant, (50, 95))
    for row in by_tenant:
        row["input_tokens_p50"], row["input_tokens_p95"] = percentiles.get(row["tenant"], [0, 0])
    report["by_tenant"] = by_tenant
    report["by_tag"] = _by(groups, lambda g: (g.tag or "untagged",), ("tag",), total.cost_units,
                           metered_only=True, hit_rate=True)
    report["by_workload"] = _workloads(groups, inp.workload_bounds, total.cost_units)
    report["by_tag_workload"] = _by(groups, lambda g: (g.tag or "untagged", g.workload), ("tag", "workload"),
                                    total.cost_units, metered_only=True)
    report["workload_summary"] = workload_summary(report["by_workload"])
    report["daily"] = _daily(groups, start, end, inp.tz)
    hourly = _hourly(groups, inp.tz)
    report["hourly_profile"] = hourly
    report["peak_to_offpeak_ratio"] = peak_to_offpeak([h["tokens"] for h in hourly])
    report["forecast"] = _forecast(total, start, end, inp.now)
    report["what_if"] = _what_if(groups, inp)
    if inp.reprice_at is not None:
        priced = _Repricer(inp.book)
        units = sum(priced(g, g.tier, inp.reprice_at) for g in groups)
        report["reprice"] = {"at": inp.reprice_at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
                             "cost_usd": _usd(units)}
    report["self_hosting"] = _self_hosting(groups, inp, start, end)
    return report


def _by(groups: list[_Group], key: Any, names: tuple[str, ...], total_units: int, metered_only: bool = False,
        hit_rate: bool = False) -> list[dict[str, Any]]:
    sums: dict[tuple[str, ...], _Sums] = defaultdict(_Sums)
    for g in groups:
        if not metered_only or g.metered:
            sums[key(g)].add(g)
    rows = []
    for k, s in sorted(sums.items(), key=lambda kv: (-kv[1].cost_units, kv[0])):
        row: dict[str, Any] = dict(zip(names, k, strict=True))
        row.update(requests=s.requests, **s.tokens(), cost_usd=_usd(s.cost_units),
                   cost_share=_share(s.cost_units, total_units))
        if hit_rate:
            row["cache_hit_rate"] = s.cache_hit_rate()
        rows.append(row)
    return rows


def _workloads(groups: list[_Group], bounds: tuple[int, int, int], total_units: int) -> list[dict[str, Any]]:
    sums = {w: _Sums() for w in WORKLOADS}
    for g in groups:
        if g.workload in sums:
            sums[g.workload].add(g)
    mins = dict(zip(WORKLOADS, (0, *bounds), strict=True))
    return [{"workload": w, "min_input_tokens": mins[w], "requests": s.requests, **s.tokens(),
             "cost_usd": _usd(s.cost_units), "cost_share": _share(s.cost_units, total_units),
             "cache_hit_rate": s.cache_hit_rate()} for w, s in sums.items()]


def workload_summary(rows: list[dict[str, Any]]) -> str:
    """The decision in plain words: what share of calls and of cost each long class has."""
    calls = sum(r["requests"] for r in rows)
    if not calls:
        return "No metered requests this month."
    words = {"short": "short", "medium": "medium", "long": "long-document", "very_long": "very-long-document"}
    parts = [f"{words[r['workload']]} requests are {r['requests'] / calls:.0%} of calls and "
             f"{r['cost_share']:.0%} of cost" for r in rows if r["requests"]]
    return "; ".join(parts) + "."


def _daily(groups: list[_Group], start: datetime, end: datetime, tz: ZoneInfo) -> list[dict[str, Any]]:
    days: dict[date, _Sums] = {}
    split: dict[date, dict[str, int]] = {}
    d = start.date()
    while d < end.date():
        days[d], split[d] = _Sums(), {}
        d += timedelta(days=1)
    for g in groups:
        local = g.hour.astimezone(tz).date()
        if local in days:
            days[local].add(g)
            if g.cost_units:
                key = f"{g.model}/{g.tier}"
                split[local][key] = split[local].get(key, 0) + g.cost_units
    return [{"date": d.isoformat(), "requests": s.requests, **s.tokens(), "cost_usd": _usd(s.cost_units),
             "cost_by_model_tier": {k: _usd(v) for k, v in sorted(split[d].items())}}
            for d, s in days.items()]


def _hourly(groups: list[_Group], tz: ZoneInfo) -> list[dict[str, int]]:
    # Bins by the local hour the UTC hour starts in (exact for whole-hour offsets).
    hours = [{"hour": h, "requests": 0, "tokens": 0} for h in range(24)]
    for g in groups:
        h = hours[g.hour.astimezone(tz).hour]
        h["requests"] += g.requests
        h["tokens"] += g.billed_tokens
    return hours


def peak_to_offpeak(tokens_by_hour: list[int]) -> float:
    """Mean tokens of the 4 busiest hours over the mean of the 12 quietest (0 when those are 0)."""
    ordered = sorted(tokens_by_hour, reverse=True)
    quiet = sum(ordered[-12:]) / 12
    return (sum(ordered[:4]) / 4) / quiet if quiet else 0.0


def _forecast(total: _Sums, start: datetime, end: datetime, now: datetime) -> dict[str, Any]:
    if now >= end:
        return {"month_complete": True, "projected_cost_usd": _usd(total.cost_units),
                "projected_tokens": total.billed_tokens, "method": "the month is complete: actual totals"}
    days = (end - start) / timedelta(days=1)
    elapsed = max((now - start) / timedelta(days=1), 0.0)
    if elapsed <= 0:
        return {"month_complete": False, "projected_cost_usd": "0", "projected_tokens": 0,
                "method": "the month has not started"}
    with localcontext(Context(prec=60)):  # enough digits for any month the ledger can hold
        factor = Decimal(days) / Decimal(elapsed)
        units = (Decimal(total.cost_units) * factor).quantize(Decimal(1), ROUND_HALF_EVEN)
    return {"month_complete": False, "projected_cost_usd": _usd(int(units)),
            "projected_tokens": int(total.billed_tokens * factor),
            "method": f"run-rate: {elapsed:.2f} of {days:.0f} days elapsed, totals so far x {float(factor):.3f}"}


class _Repricer:
    """Prices groups with the tables in force at a given time, one lookup per distinct key.

    A cost is a token count times an integer unit price per token, so pricing the month's
    few thousand groups needs only the few distinct prices (PriceBook.resolve_units).
    """

    def __init__(self, book: PriceBook) -> None:
        self.book = book

    def __call__(self, g: _Group, tier: str, at: datetime, fold_cache: bool = False) -> int:
        if g.unpriced_model or not g.metered:
            return 0
        resolved = self.book.resolve_units(g.model, tier or "standard", at, upstream=g.upstream or None)
        if resolved is None:
            return 0
        pi, pr, pw, po = resolved[1]
        if fold_cache:  # as if nothing were cached: cache tokens billed as input
            return g.input_side * pi + g.output_tokens * po
        return g.input_tokens * pi + g.cache_read_tokens * pr + g.cache_write_tokens * pw + g.output_tokens * po


def _what_if(groups: list[_Group], inp: ReportInput) -> dict[str, str]:
    api = [g for g in groups if g.upstream not in inp.self_hosted_upstreams]
    priced = _Repricer(inp.book)
    fastest = {m: "highspeed" if "highspeed" in inp.book.tiers(m) else "standard" for m in {g.model for g in api}}
    # Each group is repriced with the tables in force at its own hour.
    standard = sum(priced(g, "standard", g.hour) for g in api)
    highspeed = sum(priced(g, fastest[g.model], g.hour) for g in api)
    no_cache = sum(priced(g, g.tier, g.hour, fold_cache=True) for g in api)
    return {"all_standard_usd": _usd(standard), "all_highspeed_usd": _usd(highspeed),
            "without_cache_usd": _usd(no_cache)}


def _self_hosting(groups: list[_Group], inp: ReportInput, start: datetime, end: datetime) -> dict[str, Any]:
    sh = inp.selfhost
    api = [g for g in groups if g.upstream not in inp.self_hosted_upstreams and g.metered]
    api_units = sum(g.cost_units for g in api)
    api_tokens = sum(g.billed_tokens for g in api)
    monthly = sh.monthly_cost_usd()
    # Amortisation can divide to a repeating decimal: kept to the ledger's 10^-10 USD.
    monthly_units = int((monthly * 10**10).quantize(Decimal(1), ROUND_HALF_EVEN))
    breakeven = int(Decimal(monthly_units) * api_tokens / api_units) if api_units else 0
    multiple = breakeven / api_tokens if api_tokens else 0.0
    # Per clock hour of the month: the load the nodes would have carried.
    by_hour: dict[datetime, list[int]] = defaultdict(lambda: [0, 0])
    for g in groups:
        if g.metered:
            h = by_hour[g.hour]
            h[0] += g.input_side
            h[1] += g.output_tokens
    prefill = sh.nodes * sh.node_prefill_tokens_per_s
    decode = sh.nodes * sh.node_decode_tokens_per_s
    peak = max(by_hour.values(), key=lambda v: v[0] + v[1], default=[0, 0])
    fits = peak[0] / 3600 <= prefill and peak[1] / 3600 <= decode
    # The month's hours so far (all of them once it is complete): idle hours count as 0.
    hours = max(1.0, (min(end, max(inp.now, start)) - start) / timedelta(hours=1))
    load = sum(max(i / 3600 / prefill, o / 3600 / decode) for i, o in by_hour.values())
    utilisation = load / hours if hours else 0.0
    api_usd = Decimal(api_units).scaleb(-10)
    assumptions = _assumptions(sh)
    if api_tokens:
        summary = (f"At your volume ({api_tokens:,} API tokens this month) the API costs "
                   f"${api_usd.quantize(Decimal('0.01')):,}; self-hosting on {sh.nodes} nodes costs "
                   f"${monthly.quantize(Decimal('0.01')):,} a month and breaks even at {multiple:,.1f}x your volume "
                   f"({breakeven:,} tokens a month). The peak hour {'fits' if fits else 'does not fit'} the assumed "
                   f"node throughput; the nodes would be {utilisation:.1%} utilised.")
    else:
        summary = "No API traffic this month: nothing to compare self-hosting with."
    return {"assumptions": assumptions, "monthly_cost_usd": _usd(monthly_units),
            "api_cost_usd": _usd(api_units), "api_tokens": api_tokens, "breakeven_monthly_tokens": breakeven,
            "volume_multiple_to_breakeven": multiple,
            "peak_hour_tokens_per_s": (peak[0] + peak[1]) / 3600, "peak_fits": fits,
            "utilisation": utilisation, "summary": summary}


_SOURCES = {
    "nodes": "launch coverage: a second node for redundancy",
    "node_capex_usd": "launch coverage: US$550,000-650,000 per 8-GPU node",
    "amortization_months": "assumption, no source",
    "power_kw_per_node": "assumption, no source",
    "usd_per_kwh": "assumption, no source",
    "ops_usd_per_month": "assumption, no source (staff share)",
    "node_prefill_tokens_per_s": "assumption, no source",
    "node_decode_tokens_per_s": "vendor claim: 17,678 tokens/s aggregate on 8x MI355X, conditions unpublished",
}


def _assumptions(sh: SelfHost) -> dict[str, dict[str, str]]:
    out = {}
    for name, source in _SOURCES.items():
        value = getattr(sh, name)
        out[name] = {"value": format(value.normalize(), "f") if isinstance(value, Decimal) else str(value),
                     "source": "llmmeter.toml [selfhost]" if name in sh.overridden else source}
    return out

