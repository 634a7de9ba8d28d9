"""On PostgreSQL `requests` is partitioned by UTC month (migration 012): made so in place with the
rows and rollups as they were, fed by the writers, and pruned by dropping a month's partition."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg

from proxy.ledger.migrations import load
from proxy.ledger.retention import prune
from proxy.ledger.store import COLUMNS, open_store
from proxy.ledger.store.rows import to_row, values_of
from tests.ledger.helpers import EVER, full_record
from tests.ledger.test_migrate import MIGRATIONS_TABLE

SEP, NOV = datetime(2026, 9, 2, 10, tzinfo=UTC), datetime(2026, 11, 2, 10, tzinfo=UTC)
NOW = datetime(2026, 12, 7, tzinfo=UTC)
ROLLUP = "SELECT * FROM hourly_rollup ORDER BY hour, model, tenant, tier, upstream, tag, workload, price_band"
# Requests per hour in the size histogram: 003's before migration 015, 015's (span 1) after it.
HISTOGRAM = "SELECT hour, SUM(requests) FROM {table} GROUP BY hour ORDER BY hour"
HISTOGRAM_015 = HISTOGRAM.format(table="size_histogram WHERE span = 1")


def ledger_at_011(url: str) -> None:
    """A ledger as llmmeter left it before migration 012, holding 3 September and 4 November rows."""
    marks = ", ".join(["%s"] * len(COLUMNS))
    with psycopg.connect(url, autocommit=True) as pg:
        pg.execute(MIGRATIONS_TABLE.encode())
        for m in load("postgresql")[:11]:
            pg.execute(m.sql.encode())
            pg.execute(b"INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (m.version, m.name))
        for i, start in enumerate([SEP] * 3 + [NOV] * 4):
            r = full_record(i, start=start + timedelta(minutes=i), budget_leases=None)
            pg.execute(f"INSERT INTO requests ({', '.join(COLUMNS)}) VALUES ({marks})".encode(),
                       values_of(to_row(r)))


def read(url: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url) as pg:
        return list(pg.execute(sql.encode()).fetchall())


def partitions(url: str) -> list[str]:
    return [str(name) for (name,) in read(url, "SELECT c.relname FROM pg_inherits i JOIN pg_class c "
                                               "ON c.oid = i.inhrelid WHERE i.inhparent = 'requests'::regclass "
                                               "ORDER BY 1")]


def test_migration_012_partitions_requests_in_place_and_a_prune_drops_a_partition(pg_url: str) -> None:
    ledger_at_011(pg_url)
    rollup, histogram = read(pg_url, ROLLUP), read(pg_url, HISTOGRAM.format(table="input_side_histogram"))
    rows = read(pg_url, "SELECT * FROM requests ORDER BY id")
    store = open_store(pg_url)
    assert store.migrate() == len(load()) - 11
    assert read(pg_url, "SELECT relkind FROM pg_class WHERE relname = 'requests'") == [("p",)]
    assert partitions(pg_url) == ["requests_202609", "requests_202611", "requests_default"]
    assert read(pg_url, "SELECT * FROM requests ORDER BY id") == rows  # every row, every value
    # Counted once, not again.
    assert read(pg_url, ROLLUP) == rollup and read(pg_url, HISTOGRAM_015) == histogram

    writer = store.writer()
    try:
        again = [full_record(i, start=(SEP if i < 3 else NOV) + timedelta(minutes=i), budget_leases=None)
                 for i in range(7)]
        assert writer.insert_many(again) == 0  # already there: skipped by (id, start)
        assert writer.insert_many([full_record(100, start=NOW, budget_leases=None)]) == 1
    finally:
        writer.close()
    assert "requests_202612" in partitions(pg_url)  # a month's partition made before its first row
    assert store.count(*EVER, None) == 8
    assert sum(int(r[0]) for r in read(pg_url, "SELECT requests FROM hourly_rollup")) == 8

    before = read(pg_url, ROLLUP)
    assert [p.rows for p in prune(store, "2026-11", apply=True, now=NOW)] == [3]
    assert "requests_202609" not in partitions(pg_url)  # dropped whole
    assert read(pg_url, ROLLUP) == before and store.count(*EVER, None) == 5

    writer = store.writer()
    try:  # a late record of the pruned month (a journal replayed late) lands, and the next prune takes it
        assert writer.insert_many([full_record(101, start=SEP, budget_leases=None)]) == 1
    finally:
        writer.close()
    assert "requests_202609" in partitions(pg_url) and store.count(*EVER, None) == 6
    assert [p.rows for p in prune(store, "2026-11", apply=True, now=NOW)] == [1]
    assert read(pg_url, "SELECT requests FROM pruned_months WHERE month = '2026-09'") == [(4,)]
    assert store.count(*EVER, None) == 5


def test_a_row_whose_partition_was_dropped_under_a_writer_waits_in_the_default_one_then_moves(pg_url: str) -> None:
    ledger_at_011(pg_url)
    store = open_store(pg_url)
    store.migrate()
    early = store.writer()  # has made sure of November's partition once, and trusts it since
    try:
        assert early.insert_many([full_record(200, start=NOV, budget_leases=None)]) == 1
        assert [p.month for p in prune(store, "2026-12", apply=True, now=NOW)] == ["2026-09", "2026-11"]
        assert early.insert_many([full_record(201, start=NOV, budget_leases=None)]) == 1
    finally:
        early.close()
    assert read(pg_url, "SELECT id FROM requests_default") == [("req-00000201",)]
    later = store.writer()
    try:
        assert later.insert_many([full_record(202, start=NOV, budget_leases=None)]) == 1
        assert later.insert_many([full_record(201, start=NOV, budget_leases=None)]) == 0  # moved, still unique
    finally:
        later.close()
    assert read(pg_url, "SELECT COUNT(*) FROM requests_default") == [(0,)]
    assert read(pg_url, "SELECT id FROM requests_202611 ORDER BY id") == [("req-00000201",), ("req-00000202",)]
