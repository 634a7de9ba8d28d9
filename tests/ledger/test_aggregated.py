"""A record that stands for many requests (an aggregated refusal, migration 009) counts as that
many wherever the ledger counts requests: the hourly rollup, and the partial hours summed from
the rows; on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from proxy.ledger import Ledger
from proxy.metering.refusals import aggregated_record
from tests.ledger.helpers import full_record

MINUTE = datetime(2026, 11, 3, 14, 5, tzinfo=UTC)


def test_an_aggregated_record_counts_as_the_requests_it_stands_for(db_url: str, ledgers: list[Ledger]) -> None:
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    ledger.start()
    ledger.append_many([aggregated_record(MINUTE, "missing_key", 2000), aggregated_record(MINUTE, "unknown_key", 7),
                        full_record(1)])
    assert ledger.flush()
    [a, b, one] = ledger.rows(MINUTE, MINUTE + timedelta(hours=1))
    assert (a.request_count, a.flags, b.request_count, one.request_count) == (2000, ["aggregated", "missing_key"],
                                                                               7, 1)
    hour = MINUTE.replace(minute=0)
    whole = ledger.store.hourly_rows(hour, hour + timedelta(hours=1), None)  # from the rollup
    partial = ledger.store.hourly_rows(MINUTE, MINUTE + timedelta(minutes=30), None)  # from the rows
    for rows in (whole, partial):
        by_tenant = {r.tenant: r.requests for r in rows}
        assert by_tenant == {"unauthenticated": 2007, "search-team": 1}
