"""Cost per million tokens self-hosted against the API, by utilisation (SPEC "Self-hosting,
version 2", `cost_curve`).

The deployment is the node profile that costs least a month at its `with_redundancy` nodes.
Its utilisation in a minute is the largest of the three loads (KV tokens in flight, prefill
and decode tokens/s) ÷ that load's capacity on the deployment; the month's is the mean over
every minute, idle ones as 0. Scaling the month's traffic by k scales every minute's loads,
and so the utilisation, by k: at utilisation u the deployment would serve this month's API
tokens × u ÷ the measured utilisation, for the same monthly cost. Money is integer 10^-10 USD,
each figure rounded half-even once from exact fractions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from operator import attrgetter, mul
from zoneinfo import ZoneInfo

from proxy.ledger.store import HourlyRow, Store
from proxy.report.load import FIGURES, LoadByMinute, load_by_minute
from proxy.report.nodes import LIMITS, NodeNeed, nodes_needed, profiles
from proxy.settings import NodeProfile, SelfHost

HOURS_PER_MONTH = 730  # as SPEC's power cost has it
UNITS_PER_USD = 10**10
MTOK = 10**6
# The curve's points: 5% to 100% utilisation in steps of 5 (no point at 0, where a token costs without bound).
GRID = tuple(Fraction(i, 20) for i in range(1, 21))


@dataclass(frozen=True, slots=True)
class CurvePoint:
    utilisation: Fraction
    self_hosted_units_per_mtok: int


@dataclass(frozen=True, slots=True)
class CostCurve:
    node: str  # the cheapest profile at its with_redundancy nodes
    nodes: int
    monthly_cost_units: int  # the deployment's monthly cost
    api_units: int  # the month's API cost (non-self-hosted upstreams)
    api_tokens: int  # their four billing categories
    points: tuple[CurvePoint, ...]  # empty when the month had no load or no API tokens
    api_units_per_mtok: int | None  # None: no API tokens
    measured_utilisation: Fraction
    breakeven_utilisation: Fraction | None  # None: no API cost or no load; above 1: never on this deployment
    self_hosted_units_per_mtok_measured: int | None  # at the measured utilisation; None as points are empty


def monthly_cost_units(p: NodeProfile, nodes: int, sh: SelfHost) -> int:
    """nodes × (rent, else capex ÷ amortization months) + nodes × kW × 730 h × $/kWh (when the
    profile has power) + ops, per deployment; rounded half-even to 10^-10 USD once."""
    per_node = (Fraction(p.rent_usd_per_month) if p.rent_usd_per_month is not None
                else Fraction(p.capex_usd or 0) / sh.amortization_months)
    power = (Fraction(p.power_kw) * HOURS_PER_MONTH * Fraction(sh.usd_per_kwh)
             if p.power_kw is not None else Fraction(0))
    return round((nodes * (per_node + power) + Fraction(sh.ops_usd_per_month)) * UNITS_PER_USD)


def api_traffic(rows: list[HourlyRow], self_hosted_upstreams: frozenset[str]) -> tuple[int, int]:
    """The month's API cost (10^-10 USD) and tokens (input, cache reads, cache writes, output)."""
    api = [row for row in rows if row.upstream not in self_hosted_upstreams and row.metered]
    # The five billing categories (reasoning is inside output), as Usage.billed_tokens counts them.
    return sum(row.cost_units for row in api), sum(
        row.input_tokens + row.cache_read_tokens + row.cache_write_tokens + row.cache_write_1h_tokens
        + row.output_tokens for row in api)


def utilisation(load: LoadByMinute, p: NodeProfile, nodes: int) -> Fraction:
    """The mean over the month's minutes of the largest load ÷ its capacity on `nodes` nodes."""
    if not load.minutes:
        return Fraction(0)
    # Each load ÷ capacity is a minute sum ÷ a constant denominator: over their product the three
    # are integers, so the month's sum of maxima stays exact without a Fraction per minute.
    # n nodes divide every capacity by n, and so every minute's largest load: one node's sum, over n.
    read = attrgetter(*(FIGURES[figure][0] for _, figure, _ in LIMITS))
    denominators = [FIGURES[figure][1] * getattr(p, capacity) for _, figure, capacity in LIMITS]
    common = math.prod(denominators)
    scale = [common // d for d in denominators]
    total = sum(max(map(mul, read(row), scale)) for row in load.rows)
    return Fraction(total, common * load.minutes * nodes)


def cost_curve(load: LoadByMinute, needs: tuple[NodeNeed, ...], sh: SelfHost, api_units: int,
               api_tokens: int) -> CostCurve | None:
    """None when there is no node profile."""
    if not needs:
        return None
    costs = [(monthly_cost_units(x.profile, x.with_redundancy, sh), i) for i, x in enumerate(needs)]
    monthly, i = min(costs)  # the first of equals: the profiles' order
    need = needs[i]
    measured = utilisation(load, need.profile, need.with_redundancy)
    per_mtok = round(Fraction(api_units * MTOK, api_tokens)) if api_tokens else None
    points: tuple[CurvePoint, ...] = ()
    at_measured = None
    breakeven = None
    if api_tokens and measured:
        def at(u: Fraction) -> int:  # the same monthly cost over the tokens served at u
            return round(Fraction(monthly * MTOK) * measured / (api_tokens * u))

        points = tuple(CurvePoint(u, at(u)) for u in GRID)
        at_measured = at(measured)
        if api_units:
            breakeven = measured * monthly / api_units
    return CostCurve(node=need.node, nodes=need.with_redundancy, monthly_cost_units=monthly, api_units=api_units,
                     api_tokens=api_tokens, points=points, api_units_per_mtok=per_mtok,
                     measured_utilisation=measured, breakeven_utilisation=breakeven,
                     self_hosted_units_per_mtok_measured=at_measured)


def month_so_far(store: Store, sh: SelfHost, self_hosted_upstreams: frozenset[str], now: datetime
                 ) -> CostCurve | None:
    """The report's cost_curve for the UTC month of `now`, so far, over every tenant: what `serve`
    exports for the cost dashboard (proxy/metrics/curve.py), the same figures as `llmmeter report
    --month` of this month in UTC."""
    now = now.astimezone(UTC)
    start = datetime(now.year, now.month, 1, tzinfo=UTC)
    end = (start + timedelta(days=32)).replace(day=1)
    load = load_by_minute(store, start, end, now, ZoneInfo("UTC"), None)
    units, tokens = api_traffic(store.grouped_rows(start, end, None, ("upstream", "metered")), self_hosted_upstreams)
    return cost_curve(load, nodes_needed(load, profiles(sh)), sh, units, tokens)
