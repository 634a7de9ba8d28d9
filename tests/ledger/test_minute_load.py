"""The per-minute load table (migration 013) holds, for every UTC minute, what a
second-by-second simulation of the same records gives, on both backends, whichever way the
records arrived: the importer, insert_many (duplicates skipped, not counted twice), or a
ledger that had them before the migration."""

from __future__ import annotations

import sqlite3

import psycopg

from proxy.ledger import Ledger
from proxy.ledger.record import Record
from proxy.ledger.store import MinuteLoad, SqlStore, is_postgresql, open_store, sqlite_path
from tests.ledger.helpers import EVER, written
from tests.ledger.seeded_load import Minute, seeded_month, simulate


def check(found: list[MinuteLoad], expected: dict[int, Minute]) -> None:
    rows = {row.minute: row for row in found}
    assert set(rows) == {m for m, x in expected.items() if x.busy_s or x.prefill or x.decode or x.kv_token_s}
    for minute, want in expected.items():
        got = rows.get(minute)
        if got is None:
            continue
        # Time in flight is exact; each record rounds its share of a minute once, to a
        # thousandth of a token (prefill, decode) and to a token-millisecond (KV).
        slack = want.records / 2
        assert got.busy_us == want.busy_s * 1_000_000, minute
        assert abs(got.prefill_mtokens - want.prefill * 1000) <= slack, minute
        assert abs(got.decode_mtokens - want.decode * 1000) <= slack, minute
        assert abs(got.kv_token_ms - want.kv_token_s * 1000) <= slack, minute


def test_insert_many_keeps_the_minute_table_and_skips_duplicates(db_url: str) -> None:
    records = seeded_month()
    store = open_store(db_url)
    store.migrate()
    writer = store.writer()
    try:
        for at in range(0, len(records), 97):
            writer.insert_many(records[at:at + 97])
        assert writer.insert_many(records[:300]) == 0  # a replay: nothing new, nothing added twice
    finally:
        writer.close()
    check(store.minute_load(*EVER, None), simulate(records))
    check(store.minute_load(*EVER, "agents"), simulate(records, "agents"))


def test_the_importer_keeps_the_minute_table(db_url: str, ledgers: list[Ledger]) -> None:
    records = seeded_month(7)
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    ledger.start()
    ledger.append_many(records)
    assert ledger.flush(60)
    check(ledger.store.minute_load(*EVER, None), simulate(records))


def test_migration_013_fills_the_table_from_the_rows_a_ledger_already_has(db_url: str) -> None:
    records = seeded_month(11)
    store = open_store(written(db_url, records))
    _before_013(db_url)
    assert store.migrate() == 1
    check(store.minute_load(*EVER, None), simulate(records))


def test_repricing_a_record_leaves_its_minutes_alone(db_url: str) -> None:
    records: list[Record] = seeded_month(3)[:50]
    store: SqlStore = open_store(db_url)
    store.migrate()
    writer = store.writer()
    try:
        writer.insert_many(records)
    finally:
        writer.close()
    before = store.minute_load(*EVER, None)
    with store.repricing() as r:
        found = r.candidates(*EVER, None, False, 10)
        for rec in found:
            rec.cost_units = 5
        r.update(found)
    assert store.minute_load(*EVER, None) == before  # no token count or time changed


def _before_013(url: str) -> None:
    """The ledger as an llmmeter before migration 013 left it (its rows stay)."""
    if is_postgresql(url):
        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute(b"DROP TRIGGER requests_minute_load ON requests")
            pg.execute(b"DROP FUNCTION requests_minute_load()")
            pg.execute(b"DROP TABLE minute_load")
            pg.execute(b"DELETE FROM schema_migrations WHERE version = 13")
        return
    con = sqlite3.connect(sqlite_path(url), isolation_level=None)
    try:
        con.execute("DROP TABLE minute_load")
        con.execute("DELETE FROM schema_migrations WHERE version = 13")
    finally:
        con.close()
