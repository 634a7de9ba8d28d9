"""The cost curve's gauges (docs/metrics.md "Cost curve"): the report's cost_curve for the month
so far, a point per `point` label with its utilisation and price, read from the ledger at most
once a minute and kept when the ledger cannot be read."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

from prometheus_client import CollectorRegistry

from proxy.ledger.store import open_store
from proxy.metrics.curve import CostCurveGauges
from proxy.report.curve import CostCurve, month_so_far
from proxy.settings import NodeProfile, SelfHost
from tests.ledger.helpers import written
from tests.ledger.seeded_load import seeded_month

NODE = NodeProfile("small", "test", kv_cache_tokens=400_000, prefill_tokens_per_s=20_000, decode_tokens_per_s=2_000,
                   rent_usd_per_month=Decimal("0.5"))
SH = SelfHost(node_profiles=(NODE,), ops_usd_per_month=Decimal(0))
NOW = datetime(2026, 11, 20, 12, tzinfo=UTC)


def curve(tmp_path: Path) -> CostCurve:
    url = written(f"sqlite:///{tmp_path / 'ledger.db'}", seeded_month())
    found = month_so_far(open_store(url, read_only=True), SH, frozenset(), NOW)
    assert found is not None and found.points and found.breakeven_utilisation is not None
    return found


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for m in registry.collect() for s in m.samples}


def test_every_point_of_the_curve_is_a_pair_of_gauges(tmp_path: Path) -> None:
    c = curve(tmp_path)
    registry = CollectorRegistry()
    calls: list[datetime] = []

    def read(now: datetime) -> CostCurve:
        calls.append(now)
        return c

    registry.register(CostCurveGauges(read))
    got = samples(registry)
    node = (("node", "small"),)
    points = {f"u{i * 5:02d}" for i in range(1, 21)} | {"measured"}
    if c.breakeven_utilisation is not None and c.breakeven_utilisation <= 1:
        points.add("breakeven")
    x = {dict(k[1])["point"]: v for k, v in got.items() if k[0] == "llmmeter_cost_curve_utilisation"}
    y = {dict(k[1])["point"]: v for k, v in got.items()
         if k[0] == "llmmeter_cost_curve_self_hosted_usd_per_million_tokens"}
    assert set(x) == set(y) == points
    assert x["u05"] == 0.05 and x["u100"] == 1.0 and x["measured"] == float(c.measured_utilisation)
    for p in c.points:  # the report's figures, 10^-10 USD as floats
        assert y[f"u{round(p.utilisation * 100):02d}"] == float(Fraction(p.self_hosted_units_per_mtok, 10**10))
    assert c.self_hosted_units_per_mtok_measured is not None and c.api_units_per_mtok is not None
    assert y["measured"] == float(Fraction(c.self_hosted_units_per_mtok_measured, 10**10))
    assert got[("llmmeter_cost_curve_api_usd_per_million_tokens", ())] == float(Fraction(c.api_units_per_mtok, 10**10))
    assert got[("llmmeter_cost_curve_monthly_cost_usd", (*node, ("nodes", str(c.nodes))))] == float(
        Fraction(c.monthly_cost_units, 10**10))
    assert got[("llmmeter_cost_curve_breakeven_utilisation", node)] == float(c.breakeven_utilisation or 0)
    # A second scrape within the minute reads no ledger.
    samples(registry)
    assert len(calls) == 1


def test_a_ledger_that_fails_leaves_the_curve_out() -> None:
    calls: list[datetime] = []

    def broken(now: datetime) -> CostCurve | None:
        calls.append(now)
        raise OSError("database is locked")

    registry = CollectorRegistry()
    registry.register(CostCurveGauges(broken))
    assert list(samples(registry)) == []  # /metrics still answers, without the curve
    # Scraping again within the minute does not try the failing ledger again (nor wait on it).
    assert list(samples(registry)) == []
    assert len(calls) == 1


def test_scrapes_while_the_curve_is_read_do_not_read_it_again(tmp_path: Path) -> None:
    """/metrics answers each scrape on a thread of its own: while one scrape reads the ledger,
    the others answer without reading it (before, each one read the month again: 8 scrapes at
    once against a served ledger of 300,000 records took 0.55 s of CPU instead of 0.08)."""
    url = written(f"sqlite:///{tmp_path / 'ledger.db'}", seeded_month())
    reader = open_store(url, read_only=True)
    reading, release = threading.Event(), threading.Event()
    calls: list[datetime] = []

    def read(now: datetime) -> CostCurve | None:
        calls.append(now)
        if len(calls) == 1:  # the first scrape's read is under way until the test lets it end
            reading.set()
            release.wait()
        return month_so_far(reader, SH, frozenset(), NOW)

    registry = CollectorRegistry()
    registry.register(CostCurveGauges(read))
    first: list[dict[tuple[str, tuple[tuple[str, str], ...]], float]] = []
    scrape = threading.Thread(target=lambda: first.append(samples(registry)))
    scrape.start()
    try:
        assert reading.wait(timeout=60)
        during = samples(registry)  # a second scrape while the first reads
        assert len(calls) == 1
        assert list(during) == []  # nothing read yet: the curve is left out of this one
    finally:
        release.set()
        scrape.join()
    assert any(name == "llmmeter_cost_curve_utilisation" for name, _ in first[0])
    assert samples(registry) == first[0]  # then kept for the minute
    assert len(calls) == 1
