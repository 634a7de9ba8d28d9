"""A database that cannot be written: records wait, the ledger says unhealthy, then they land."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

import psycopg

from proxy.ledger import Ledger
from proxy.ledger.store import is_postgresql, sqlite_path
from tests.ledger.helpers import EVER, full_record, wait_until


def hold_write_lock(db_url: str) -> Callable[[], None]:
    """Another client takes the write lock, a real outage for every write; returns its release."""
    if is_postgresql(db_url):
        pg = psycopg.connect(db_url)
        pg.execute("LOCK TABLE requests IN ACCESS EXCLUSIVE MODE")

        def release_pg() -> None:
            pg.rollback()
            pg.close()
        return release_pg
    lite = sqlite3.connect(sqlite_path(db_url), isolation_level=None)
    lite.execute("BEGIN EXCLUSIVE")

    def release_sqlite() -> None:
        lite.execute("ROLLBACK")
        lite.close()
    return release_sqlite


def test_records_wait_while_the_database_is_locked_and_land_after(db_url: str, ledgers: list[Ledger]) -> None:
    ledger = Ledger(db_url, busy_timeout_s=0.2)
    ledgers.append(ledger)
    ledger.start()
    release = hold_write_lock(db_url)
    for i in range(20):
        ledger.append(full_record(i))
    assert wait_until(lambda: not ledger.healthy, timeout=10)
    assert ledger.pending == 20 and ledger.journal_ok
    release()
    assert wait_until(lambda: ledger.healthy and ledger.pending == 0, timeout=15)
    assert ledger.count(*EVER) == 20
