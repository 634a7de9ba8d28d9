"""Local days and hours in the report across a DST change, and in a half-hour zone, on both backends."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from pricing import PriceBook, default_tables_dir, load_dir
from proxy.ledger.store import Store, open_store
from proxy.report import Report, ReportInput, build_report
from proxy.settings import SelfHost
from tests.ledger.helpers import full_record

# New York leaves daylight time at 2026-11-01 06:00 UTC (02:00 EDT -> 01:00 EST).
STAMPS = {
    "2026-11-01T03:30": None,                # 23:30 EDT on Oct 31: not November
    "2026-11-01T04:30": ("2026-11-01", 0),   # 00:30 EDT
    "2026-11-01T06:30": ("2026-11-01", 1),   # 01:30 EST, after the change
    "2026-12-01T04:30": ("2026-11-30", 23),  # 23:30 EST
    "2026-12-01T05:30": None,                # 00:30 EST on Dec 1
}


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    url = f"sqlite:///{tmp_path / 'ledger.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    s = open_store(url)
    s.migrate()
    writer = s.writer()
    writer.insert_many([full_record(i, start=datetime.fromisoformat(t).replace(tzinfo=UTC))
                        for i, t in enumerate(STAMPS)])
    writer.close()
    return s


def report(store: Store, tz: str) -> Report:
    inp = ReportInput(month="2026-11", tz=ZoneInfo(tz), book=PriceBook(load_dir(default_tables_dir())),
                      selfhost=SelfHost(), workload_bounds=(4096, 32768, 131072),
                      now=datetime(2026, 12, 15, tzinfo=UTC))
    return build_report(store, inp)


def test_dst_month_uses_local_days_and_hours(store: Store) -> None:
    r = report(store, "America/New_York")
    assert r.totals.usage.requests == len([v for v in STAMPS.values() if v])
    assert {d.date.isoformat(): d.usage.requests for d in r.daily if d.usage.requests} == {
        "2026-11-01": 2, "2026-11-30": 1}
    assert {h.hour: h.requests for h in r.hourly_profile if h.requests} == {0: 1, 1: 1, 23: 1}
    assert len(r.daily) == 30


def test_half_hour_zone_bounds_come_from_the_requests(store: Store) -> None:
    # November in Kolkata is [2026-10-31T18:30Z, 2026-11-30T18:30Z): the three Nov 1 stamps, not Dec 1's.
    r = report(store, "Asia/Kolkata")
    assert r.totals.usage.requests == 3
    assert {d.date.isoformat(): d.usage.requests for d in r.daily if d.usage.requests} == {"2026-11-01": 3}
