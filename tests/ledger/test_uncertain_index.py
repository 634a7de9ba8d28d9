"""Migration 014: the report's unpriced and estimated requests are read through a partial index
that holds only them, on SQLite and PostgreSQL, not by scanning the month."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime

import psycopg

from proxy.ledger import Ledger
from proxy.ledger.migrations import load
from proxy.ledger.store import is_postgresql, sqlite_path
from proxy.ledger.store.rows import to_micros
from proxy.ledger.store.unpriced_report import UNCERTAIN, uncertain_query, uncertain_rows
from tests.ledger.helpers import full_record

LO, HI = to_micros(datetime(2026, 11, 1, tzinfo=UTC)), to_micros(datetime(2026, 12, 1, tzinfo=UTC))


def plan(url: str, sql: str, params: tuple[object, ...]) -> str:
    if is_postgresql(url):
        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute(b"SET enable_seqscan = off")  # a test table is small enough for a scan to win
            return "\n".join(str(r[0]) for r in pg.execute(f"EXPLAIN {sql}".encode(), params).fetchall())
    con = sqlite3.connect(sqlite_path(url))
    try:
        return "\n".join(str(r[-1]) for r in con.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall())
    finally:
        con.close()


def uncertain_indexes(url: str) -> list[str]:
    """requests_uncertain, and on PostgreSQL (requests partitioned by month, migration 012) the
    index PostgreSQL made from it on each month's partition, which is what a plan names."""
    if not is_postgresql(url):
        return ["requests_uncertain"]
    with psycopg.connect(url, autocommit=True) as pg:
        children = pg.execute(b"SELECT inhrelid::regclass::text FROM pg_inherits "
                              b"WHERE inhparent = 'requests_uncertain'::regclass").fetchall()
    return ["requests_uncertain", *(str(c[0]) for c in children)]


def test_the_index_holds_the_reports_own_condition() -> None:
    for dialect in ("sqlite", "postgresql"):
        [m] = [m for m in load(dialect) if m.version == 14]
        assert f"WHERE {UNCERTAIN};" in " ".join(m.sql.split()), "the index must keep the query's condition verbatim"


def test_the_report_reads_unpriced_and_estimated_requests_through_the_index(db_url: str,
                                                                            ledgers: list[Ledger]) -> None:
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    ledger.start()
    records = [full_record(i, usage_source="upstream") for i in range(50)]
    records += [full_record(100, usage_source="estimated"), full_record(101, model=None, cost_units=None,
                                                                         usage_source="upstream")]
    ledger.append_many(records)
    assert ledger.flush() and ledger.rejected == 0
    names = uncertain_indexes(db_url)
    for tenant in (None, "search-team"):
        shown = plan(db_url, *uncertain_query(ledger.store, LO, HI, tenant))
        assert any(name in shown for name in names), (names, shown)
    found = uncertain_rows(ledger.store, LO, HI)
    assert sorted((r.unpriced, r.estimated, r.requests) for r in found) == [(False, True, 1), (True, False, 1)]
