"""The report's cost curve for the month so far, as gauges (docs/metrics.md, "Cost curve").

The cost dashboard draws self-hosted USD per million tokens by utilisation against the API's,
with the measured utilisation marked, from these. Grafana's XY chart needs each point's x and
y as values: every point is a `point` label (`u05` ... `u100`, the report's grid, then
`measured` and `breakeven`) carried by two gauges, its utilisation and its cost, so the label
set is fixed and a changing utilisation never makes a new series.

The figures come from the ledger (proxy/report/curve.py `month_so_far`): the month's minutes
and the API's cost and tokens, a few thousand rows whatever the month holds, read at most
once a minute.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from fractions import Fraction

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from proxy.report.curve import UNITS_PER_USD, CostCurve

EVERY_S = 60  # the curve moves with the month's mean: reading the ledger once a minute is plenty
UTILISATION = "llmmeter_cost_curve_utilisation"
SELF_HOSTED = "llmmeter_cost_curve_self_hosted_usd_per_million_tokens"
API = "llmmeter_cost_curve_api_usd_per_million_tokens"
MONTHLY = "llmmeter_cost_curve_monthly_cost_usd"
BREAKEVEN = "llmmeter_cost_curve_breakeven_utilisation"


def point_name(u: Fraction) -> str:
    """u05 ... u100: the grid's utilisation in percent, zero-padded so the names sort."""
    return f"u{round(u * 100):02d}"


def _usd(units: int) -> float:
    return float(Fraction(units, UNITS_PER_USD))


def points(c: CostCurve) -> list[tuple[str, Fraction, int]]:
    """(point, utilisation, self-hosted 10^-10 USD per million tokens): the grid, the measured
    utilisation and the break-even when it is within reach (at most 100%)."""
    out = [(point_name(p.utilisation), p.utilisation, p.self_hosted_units_per_mtok) for p in c.points]
    if c.self_hosted_units_per_mtok_measured is not None:
        out.append(("measured", c.measured_utilisation, c.self_hosted_units_per_mtok_measured))
    if c.breakeven_utilisation is not None and c.breakeven_utilisation <= 1 and c.api_units_per_mtok is not None:
        out.append(("breakeven", c.breakeven_utilisation, c.api_units_per_mtok))
    return out


class CostCurveGauges(Collector):
    """Gauges read at scrape time from `curve(now)`, cached for EVERY_S seconds (a failed read
    too: a ledger that cannot be read is tried again a minute later, not at every scrape)."""

    def __init__(self, curve: Callable[[datetime], CostCurve | None]) -> None:
        self.curve = curve
        self._cached: tuple[float, CostCurve | None] | None = None
        # Each /metrics answer is made on a thread of its own: without this, every scrape that
        # finds the figures stale while one reads them reads the ledger again (8 at once: 8 reads).
        self._reading = threading.Lock()

    def collect(self) -> Iterable[GaugeMetricFamily]:
        c = self._current()
        x = GaugeMetricFamily(UTILISATION, "A point of the cost curve: its utilisation of the cheapest self-hosted "
                              "deployment (0-1; point measured: this UTC month's so far)", labels=["node", "point"])
        y = GaugeMetricFamily(SELF_HOSTED, "A point of the cost curve: the self-hosted deployment's USD per million "
                              "tokens at that utilisation", labels=["node", "point"])
        api = GaugeMetricFamily(API, "The API's USD per million tokens this UTC month so far (its cost over its "
                                "four billing categories)")
        monthly = GaugeMetricFamily(MONTHLY, "The monthly cost of the deployment the cost curve is for (the cheapest "
                                    "profile at its nodes with redundancy)", labels=["node", "nodes"])
        even = GaugeMetricFamily(BREAKEVEN, "The utilisation at which the deployment meets the API's price (above 1: "
                                 "it does not even fully used)", labels=["node"])
        if c is not None:
            monthly.add_metric([c.node, str(c.nodes)], _usd(c.monthly_cost_units))
            if c.breakeven_utilisation is not None:
                even.add_metric([c.node], float(c.breakeven_utilisation))
            for name, u, units in points(c):
                x.add_metric([c.node, name], float(u))
                y.add_metric([c.node, name], _usd(units))
            if c.api_units_per_mtok is not None:
                api.add_metric([], _usd(c.api_units_per_mtok))
        yield from (x, y, api, monthly, even)

    def _current(self) -> CostCurve | None:
        cached = self._cached
        last = None if cached is None else cached[1]
        if cached is not None and time.monotonic() - cached[0] < EVERY_S:
            return last
        # One read at a time; a scrape that comes while it runs answers with the figures before it.
        if not self._reading.acquire(blocking=False):
            return last
        try:
            cached = self._cached  # another scrape may have read them since
            if cached is not None and time.monotonic() - cached[0] < EVERY_S:
                return cached[1]
            try:
                found = self.curve(datetime.now(UTC))
            except Exception:  # a failing database must not break /metrics: the last figures stay
                found = None if cached is None else cached[1]
            self._cached = (time.monotonic(), found)
            return found
        finally:
            self._reading.release()
