"""Local days and hours in the report across a DST change, and in a half-hour zone."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from pricing import PriceBook, default_tables_dir, load_dir
from proxy.ledger import Ledger
from proxy.report import ReportInput, build_report
from proxy.report.model import Report
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


def report(ledger: Ledger, tz: str) -> Report:
    inp = ReportInput(month="2026-11", tz=ZoneInfo(tz), book=PriceBook(load_dir(default_tables_dir())),
                      selfhost=SelfHost(), workload_bounds=(4096, 32768, 131072),
                      now=datetime(2026, 12, 15, tzinfo=UTC))
    return build_report(ledger.store, inp)


def test_dst_month_uses_local_days_and_hours(db_url: str, ledgers: list[Ledger]) -> None:
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    ledger.start()
    for i, stamp in enumerate(STAMPS):
        ledger.append(full_record(i, start=datetime.fromisoformat(stamp).replace(tzinfo=UTC)))
    assert ledger.flush(10)
    r = report(ledger, "America/New_York")
    inside = [v for v in STAMPS.values() if v]
    assert r.totals.usage.requests == len(inside)
    daily = {d.date.isoformat(): d.usage.requests for d in r.daily if d.usage.requests}
    assert daily == {"2026-11-01": 2, "2026-11-30": 1}
    hours = {h.hour: h.requests for h in r.hourly_profile if h.requests}
    assert hours == {0: 1, 1: 1, 23: 1}
    assert len(r.daily) == 30
    # A half-hour zone: month bounds off whole UTC hours, summed from the requests themselves.
    # November there is [2026-10-31T18:30Z, 2026-11-30T18:30Z): the three Nov 1 stamps, not Dec 1's.
    kolkata = report(ledger, "Asia/Kolkata")
    assert kolkata.totals.usage.requests == 3
    assert {d.date.isoformat(): d.usage.requests for d in kolkata.daily if d.usage.requests} == {"2026-11-01": 3}
