"""A record's duration and time to first token are refused outside the range a ledger row holds
(proxy/ledger/store/rows.py): a crafted journal segment brought in by `ledger adopt` cannot make
the report's speed and SLO sections overflow."""

from __future__ import annotations

import json
from datetime import datetime
from zoneinfo import ZoneInfo

from proxy.ledger import Ledger
from proxy.ledger.store import open_store
from proxy.report import ReportInput, build_report, render
from proxy.settings import SelfHost
from tests.ledger.helpers import T0, full_record
from tests.ledger.test_prune import BOOK


def test_a_record_with_times_no_request_takes_is_set_aside_and_the_report_still_builds(
        db_url: str, ledgers: list[Ledger]) -> None:
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    ledger.start()
    crafted = [full_record(1, duration_ms=2**62, ttft_ms=-2**62),  # their difference is beyond a BIGINT
               full_record(2, duration_ms=-1, ttft_ms=None), full_record(3, ttft_ms=-5)]
    ledger.append_many([full_record(0), *crafted])
    assert ledger.flush()
    assert ledger.rejected == len(crafted)
    inp = ReportInput(month=f"{T0:%Y-%m}", tz=ZoneInfo("UTC"), book=BOOK, selfhost=SelfHost(),
                      workload_bounds=(4096, 32768, 131072), now=datetime(2026, 12, 7, tzinfo=ZoneInfo("UTC")))
    report = json.loads(render(build_report(open_store(db_url, read_only=True), inp), "json"))
    assert report["totals"]["requests"] == 1
