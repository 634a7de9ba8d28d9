"""What each dashboard panel promises, as a test can hold it to: a registry of panel → what it
must equal.

Every panel of every dashboard is here (test_dashboards.py fails on one that is not), and is
one of:
- `Ledger`: an instant panel whose numbers are totals of the ledger over the dashboard's range
  (money, tokens, calls, and ratios of them). test_live.py evaluates its queries on a real
  Prometheus and compares them, legend by legend, with the same sums over the ledger's rows.
- `Watch`: a panel that is not a total of the ledger (a rate over a moving window, a
  percentile from histogram buckets, a gauge from the configuration), with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from pricing import PriceBook
from pricing.model import BILLING_TYPES

USD = Decimal(10**10)
MONTH_S = 730 * 3600
Row = dict[str, Any]
Totals = dict[str, Decimal]


@dataclass(frozen=True)
class Books:
    """The ledger's rows over the dashboard's range, and how llmmeter labels them."""

    rows: list[Row]
    book: PriceBook
    tenants: frozenset[str]
    tags: frozenset[str]
    upstreams: frozenset[str]
    range_s: int
    now: datetime
    selfhost_usd: Decimal
    budgets: Callable[[Row], list[str]]  # the enforced budgets a row's request was admitted under

    def model(self, r: Row) -> str:
        return r["model"] if r["model"] in self.book.models else "other"

    def tier(self, r: Row) -> str:
        return r["tier"] or "other"

    def tenant(self, r: Row) -> str:
        return r["tenant"] if r["tenant"] in self.tenants else "other"

    def by(self, key: Callable[[Row], str], value: Callable[[Row], Decimal | int | None],
           rows: Iterable[Row] | None = None) -> Totals:
        out: Totals = {}
        for r in self.rows if rows is None else rows:
            v = value(r)
            if v:
                k = key(r)
                out[k] = out.get(k, Decimal(0)) + Decimal(v)
        return out

    def total(self, value: Callable[[Row], Decimal | int | None]) -> Decimal:
        return sum((Decimal(value(r) or 0) for r in self.rows), Decimal(0))

    def cost(self) -> Decimal:
        return self.total(lambda r: r["cost_units"]) / USD

    def tokens(self) -> Decimal:
        return sum((self.total(lambda r, t=t: r[f"{t}_tokens"]) for t in BILLING_TYPES), Decimal(0))

    def prices(self) -> dict[tuple[str, str, str], Decimal]:
        """llmmeter_price_per_million_usd as the recording rule reads it: max by (model, tier, type)."""
        out: dict[tuple[str, str, str], Decimal] = {}
        for p in self.book.in_force(self.now):
            if p.upstream is None:
                for t in BILLING_TYPES:
                    v = getattr(p, t)
                    if v is not None:
                        out[(p.model, p.tier, t)] = max(out.get((p.model, p.tier, t), v), v)
        return out


@dataclass(frozen=True)
class Ledger:
    """The panel's instant numbers, by legend, are `expect`'s (`*`: the sum of all of them)."""

    expect: Callable[[Books], Totals]
    since_restart: bool = False  # counted only over a range after llmmeter's last restart (see docs/metrics.md)


@dataclass(frozen=True)
class Watch:
    reason: str


def usd(v: Decimal | int | None) -> Decimal:
    return Decimal(v or 0) / USD


def _cost_by(b: Books, key: Callable[[Row], str]) -> Totals:
    return {k: usd(v) for k, v in b.by(key, lambda r: r["cost_units"]).items()}


def _saved(b: Books) -> Totals:
    prices = b.prices()
    saved = Decimal(0)
    for r in b.rows:
        m, t = b.model(r), b.tier(r)
        if (m, t, "input") not in prices:
            continue  # no price: the rule's join has nothing to multiply
        base = prices[(m, t, "input")]
        one_hour = prices.get((m, t, "cache_write_1h"), prices[(m, t, "cache_write")])
        saved += (Decimal(r["cache_read_tokens"] or 0) * (base - prices[(m, t, "cache_read")])
                  + Decimal(r["cache_write_tokens"] or 0) * (base - prices[(m, t, "cache_write")])
                  + Decimal(r["cache_write_1h_tokens"] or 0) * (base - one_hour)) / 1_000_000
    return {"saved": saved}


def _tokens_by_type(b: Books) -> Totals:
    out = {t: b.total(lambda r, t=t: r[f"{t}_tokens"]) for t in BILLING_TYPES}
    out["reasoning (of output)"] = b.total(lambda r: r["reasoning_tokens"])
    return out


def _cache_hit(b: Books) -> Totals:
    side = sum((b.total(lambda r, t=t: r[f"{t}_tokens"]) for t in ("input", "cache_read", "cache_write",
                                                                    "cache_write_1h")), Decimal(0))
    return {"cache hit": b.total(lambda r: r["cache_read_tokens"]) / side}


def _provider(b: Books) -> Totals:
    reported = [r for r in b.rows if r["provider_cost_units"] is not None]
    out = {f"{k} provider": v / USD for k, v in b.by(b.model, lambda r: r["provider_cost_units"], reported).items()}
    out |= {f"{k} llmmeter": v / USD for k, v in b.by(b.model, lambda r: r["cost_units"], reported).items()}
    return out


def _provider_over(b: Books) -> Totals:
    reported = [r for r in b.rows if r["provider_cost_units"] is not None]
    mine = sum((Decimal(r["cost_units"] or 0) for r in reported), Decimal(0))
    theirs = sum((Decimal(r["provider_cost_units"]) for r in reported), Decimal(0))
    return {"difference": theirs / mine - 1}


def _unpriced(b: Books) -> Totals:
    metered = ("chat", "completions", "embeddings", "responses", "messages", "batch")
    return {"unpriced": Decimal(sum(1 for r in b.rows if r["cost_units"] is None and r["outcome"] != "rejected"
                                    and r["endpoint"] in metered))}


def _overrun(b: Books) -> Totals:
    out: Totals = {}
    for r in b.rows:
        if "over_reservation" in (r["flags"] or ""):
            for name in b.budgets(r):
                out[name] = out.get(name, Decimal(0)) + usd(r["cost_units"]) - usd(r["reserved_units"])
    return out


def _calls_by_upstream(b: Books) -> Totals:
    return b.by(lambda r: r["upstream"] if r["upstream"] in b.upstreams else "other", lambda r: r["request_count"])


def _month_to_date(b: Books) -> Totals:
    return {"month to date": b.cost()}


def _projected(b: Books) -> Totals:
    n = b.now
    start = datetime(n.year, n.month, 1, tzinfo=UTC)
    end = datetime(n.year + (n.month == 12), n.month % 12 + 1, 1, tzinfo=UTC)
    elapsed = max(Decimal((n - start).total_seconds()), Decimal(3600)) / Decimal((end - start).total_seconds())
    return {"projected": b.cost() / elapsed}


def _api_rate(b: Books) -> Decimal:
    return b.cost() / b.range_s * MONTH_S


TOTALS: dict[str, Ledger] = {
    # Cost
    "Spend today": Ledger(lambda b: {"today": b.cost()}),
    "Month to date": Ledger(_month_to_date),
    "Projected month": Ledger(_projected),
    "Saved by the cache": Ledger(_saved),
    "Overrun of reservations in range": Ledger(_overrun),
    "Spend in range by model and tier": Ledger(lambda b: _cost_by(b, lambda r: f"{b.model(r)} {b.tier(r)}")),
    "Spend in range by tenant": Ledger(lambda b: _cost_by(b, b.tenant)),
    # Token categories are not in the ledger apart; the whole and the fee slice are.
    "Spend by billing category": Ledger(
        lambda b: {"*": b.cost(), "web_search": usd(b.total(lambda r: r["fee_units"]))}),
    "Spend by tag and workload": Ledger(
        lambda b: _cost_by(b, lambda r: f"{r['tag'] if r['tag'] in b.tags else 'other'} / {r['workload'] or 'other'}")),
    "Tokens in range by type": Ledger(_tokens_by_type),
    "Cache-hit ratio in range": Ledger(_cache_hit),
    "Cache writes in range by lifetime": Ledger(
        lambda b: {t: b.total(lambda r, t=t: r[f"{t}_tokens"]) for t in ("cache_write", "cache_write_1h")}),
    "Fees in range": Ledger(lambda b: {"fees": b.total(lambda r: r["fee_units"]) / USD}),
    "Provider's cost beside llmmeter's, in range": Ledger(_provider),
    "Provider over llmmeter": Ledger(_provider_over),
    "Unpriced calls in range": Ledger(_unpriced),
    # Self-hosting
    "Tokens per day": Ledger(lambda b: {"tokens/day": b.tokens() / b.range_s * 86400}),
    "Tokens per month at this rate": Ledger(lambda b: {"tokens/month": b.tokens() / b.range_s * MONTH_S}),
    "Monthly cost: API against self-hosting": Ledger(
        lambda b: {"API at this range's rate": _api_rate(b), "API, month projected": _projected(b)["projected"],
                   "self-hosting": b.selfhost_usd}),
    "Volume multiple to break-even": Ledger(lambda b: {"multiple": b.selfhost_usd / _api_rate(b)}),
    "Break-even tokens per month": Ledger(lambda b: {"tokens/month": b.selfhost_usd / (b.cost() / b.tokens())}),
    "Calls by upstream in range": Ledger(_calls_by_upstream, since_restart=True),
}

RATE = "a rate over a moving window (rate() or a 5-minute recording rule), not a total over the range"
PERCENTILE = "a percentile interpolated from histogram buckets (docs/metrics.md states the error)"
GAUGE = "a gauge llmmeter sets from the configuration or its own state, read as it is"
CURVE = "the report's cost_curve for the UTC month so far, over the month's minutes (test_live.py compares it)"

WATCHES: dict[str, Watch] = {
    "Spend rate (USD per hour)": Watch(RATE),
    "Budget used this month": Watch("month to date (the ledger's, tested in test_live.py) over a configured budget"),
    "Budget burn-down": Watch(GAUGE + ": spent (the ledger's), the limit, and a deriv() forecast"),
    "Budget used": Watch(GAUGE + ": spent over the limit"),
    "Runs out in": Watch("a deriv() forecast"),
    "Requests refused by budgets": Watch(RATE),
    "Reserved in flight": Watch(GAUGE),
    "Spend rate by model and tier": Watch(RATE),
    "Spend rate by tenant": Watch(RATE),
    "Requests by upstream and outcome": Watch(RATE),
    "Tokens per second by type": Watch(RATE),
    "Cache-hit ratio by model and tier": Watch(RATE),
    "Saved by the cache (USD per hour)": Watch(RATE),
    "Cache writes by lifetime (USD per hour)": Watch(RATE),
    "Fees by model and kind (USD per hour)": Watch(RATE),
    "Prices in force (USD per million tokens)": Watch(GAUGE + ": the price tables in force"),
    "Requests in flight": Watch(RATE + " of a counter added to when each request ends (docs/metrics.md)"),
    "KV tokens in flight": Watch(RATE + " of a counter added to when each request ends (docs/metrics.md)"),
    "Prefill and decode tokens per second, by the minute": Watch(RATE),
    "Nodes needed now by profile": Watch(RATE + ", over configured node capacities"),
    "Binding limit now by profile": Watch(RATE + ", over configured node capacities"),
    "Cost per million tokens by utilisation": Watch(CURVE),
    "Measured utilisation": Watch(CURVE),
    "Break-even utilisation": Watch(CURVE),
    "API per million tokens": Watch(CURVE),
    "Self-hosted deployment per month": Watch(CURVE),
    "TTFT p95": Watch(PERCENTILE),
    "Duration p95": Watch(PERCENTILE),
    "Proxy overhead p99": Watch(PERCENTILE),
    "Calls per second": Watch(RATE),
    "Error share": Watch(RATE + "; 0 without calls (test_live.py)"),
    "Targets up": Watch("Prometheus's own up series"),
    "Time to first token by model and tier": Watch(PERCENTILE),
    "Duration by model and endpoint": Watch(PERCENTILE),
    "Proxy overhead by endpoint": Watch(PERCENTILE),
    "Input-side tokens per call": Watch(PERCENTILE),
    "Error rate by status code": Watch(RATE),
    "Upstream failures by kind": Watch(RATE),
    "Upstream error ratio": Watch(RATE),
    "Calls by outcome": Watch(RATE),
    "Refusals before a key is known": Watch(RATE),
    "Estimated-usage share": Watch(RATE + " (30 minutes and a day); above 0 after a restart (test_live.py)"),
    "Ledger backlog": Watch(GAUGE),
    "Metering faults and refused records": Watch("per hour, over a moving hour"),
    "Daily tokens": Watch("per UTC day: test_live.py's traffic is in one day, so it is Tokens per day's total"),
    "Tokens by hour of day (UTC)": Watch("per UTC day and hour, from a 1-minute rate"),
    "Hour-of-day profile (UTC)": Watch("the mean rate in each UTC hour, all 24 hours (test_live.py)"),
    "Peak ÷ off-peak": Watch("the report's peak_to_offpeak_ratio in UTC (test_live.py compares it)"),
    "Prefill and decode tokens per second": Watch(RATE),
    "Load as a share of $nodes nodes": Watch(RATE + ", over configured node throughput"),
}

REGISTRY: dict[str, Ledger | Watch] = {**TOTALS, **WATCHES}
