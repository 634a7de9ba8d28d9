"""A database that cannot be written: records wait, the ledger says unhealthy, then they land."""

from __future__ import annotations

import sqlite3

from proxy.ledger import Ledger
from proxy.ledger.store import sqlite_path
from tests.ledger.helpers import EVER, full_record, wait_until


def test_records_wait_while_the_database_is_locked_and_land_after(db_url: str, ledgers: list[Ledger]) -> None:
    ledger = Ledger(db_url, busy_timeout_s=0.2)
    ledgers.append(ledger)
    ledger.start()
    # Another process holding SQLite's write lock is a real outage: every write fails.
    blocker = sqlite3.connect(sqlite_path(db_url), isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    for i in range(20):
        ledger.append(full_record(i))
    assert wait_until(lambda: not ledger.healthy, timeout=10)
    assert ledger.pending == 20 and ledger.journal_ok
    blocker.execute("ROLLBACK")
    blocker.close()
    assert wait_until(lambda: ledger.healthy and ledger.pending == 0, timeout=15)
    assert ledger.count(*EVER) == 20
