"""append + flush + rows give back exactly what went in; reads are ranges over [from, to)."""

from __future__ import annotations

import random
import sqlite3
from dataclasses import fields
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from proxy.ledger import Ledger
from proxy.ledger.migrations import load
from proxy.ledger.record import Record
from proxy.ledger.store import COLUMNS, HourlyRow, SqliteStore, sqlite_path
from proxy.ledger.store.histograms import ERROR
from proxy.ledger.store.rows import to_micros, to_row
from proxy.ledger.store.sql import HOURLY_SQL
from tests.ledger.helpers import BEFORE_005, EVER, T0, full_record


def test_every_field_round_trips_exactly(tmp_path: Path, db_url: str, ledgers: list[Ledger]) -> None:
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    assert ledger.start() == 0
    minimal = Record(id="req-min", start=T0 + timedelta(seconds=1), tenant="default", endpoint="models",
                     stream=False, code=0, outcome="upstream_unreachable")
    records = [full_record(i) for i in range(3)] + [minimal]
    for r in records:
        ledger.append(r)
    assert ledger.flush()
    assert ledger.pending == 0 and ledger.healthy and ledger.journal_ok
    assert list(ledger.rows(*EVER)) == records
    back = next(ledger.rows(*EVER))
    assert back.start.tzinfo is not None and back.start.utcoffset() == timedelta(0)
    assert back.start.microsecond == 123456


def test_offset_times_keep_their_instant(db_url: str, ledgers: list[Ledger]) -> None:
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    ledger.start()
    ist = timezone(timedelta(hours=5, minutes=30))
    ledger.append(full_record(0, start=T0.astimezone(ist), price_effective_from=None, cost_units=None))
    assert ledger.flush()
    (back,) = ledger.rows(*EVER)
    assert back.start == T0 and back.start.tzinfo == UTC
    assert back.cost_units is None and back.price_effective_from is None


@pytest.mark.sqlite_only  # PostgreSQL's twin: tests/ledger/test_postgres.py
def test_table_has_one_column_per_record_field(tmp_path: Path, db_url: str, ledgers: list[Ledger]) -> None:
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    ledger.start()
    con = sqlite3.connect(sqlite_path(db_url))
    try:
        cols = [row[1] for row in con.execute("PRAGMA table_info(requests)")]
        versions = [v for (v,) in con.execute("SELECT version FROM schema_migrations")]
        mode = con.execute("PRAGMA journal_mode").fetchone()[0]
        indexes = {row[1] for row in con.execute("PRAGMA index_list(requests)")}
    finally:
        con.close()
    assert cols == list(COLUMNS)  # in the table's order: 005's cost_carry before 007's columns
    assert sorted(COLUMNS) == sorted([*(f.name for f in fields(Record)), "cost_carry"])
    assert versions == [m.version for m in load("sqlite")] == list(range(1, 18)) and mode == "wal"
    assert {"requests_start", "requests_tenant_start", "requests_uncertain"} <= indexes


def test_migrations_run_once(db_url: str) -> None:
    first = Ledger(db_url)
    assert first.store.migrate() == len(load("sqlite"))
    assert Ledger(db_url).store.migrate() == 0


def test_rows_are_a_half_open_range_ordered_by_start_then_id(db_url: str, ledgers: list[Ledger]) -> None:
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    ledger.start()
    t = datetime(2026, 11, 1, tzinfo=UTC)
    stamps = [("b", t), ("a", t), ("c", t - timedelta(microseconds=1)), ("d", t + timedelta(days=30)),
              ("e", t + timedelta(days=30) - timedelta(microseconds=1))]
    for rid, start in stamps:
        ledger.append(full_record(0, id=rid, start=start, tenant="x" if rid == "a" else "y"))
    assert ledger.flush()
    got = [r.id for r in ledger.rows(t, t + timedelta(days=30))]
    assert got == ["a", "b", "e"]
    assert ledger.count(t, t + timedelta(days=30)) == 3
    assert [r.id for r in ledger.rows(t, t + timedelta(days=30), tenant="x")] == ["a"]
    assert ledger.count(t, t + timedelta(days=30), tenant="nobody") == 0


def test_a_duplicate_id_is_kept_once(db_url: str, ledgers: list[Ledger]) -> None:
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    ledger.start()
    ledger.append(full_record(1))
    ledger.append(full_record(1, tenant="other"))
    assert ledger.flush() and ledger.pending == 0
    assert [r.tenant for r in ledger.rows(*EVER)] == ["search-team"]


def test_month_to_date_cost_sums_exact_integers_per_tenant(db_url: str, ledgers: list[Ledger]) -> None:
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    ledger.start()
    nov, dec = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)
    big = 10**17 + 1  # float sums would lose the +1s
    for i, (tenant, start, units) in enumerate([
        ("a", nov - timedelta(microseconds=1), 999),  # October
        ("a", nov, big), ("a", dec - timedelta(microseconds=1), big), ("a", nov + timedelta(days=3), None),
        ("b", nov + timedelta(days=9), 7), ("c", nov + timedelta(days=1), None),
        ("b", dec, 5),  # December
    ]):
        ledger.append(full_record(i, tenant=tenant, start=start, cost_units=units))
    assert ledger.flush()
    assert ledger.month_to_date_cost(datetime(2026, 11, 15, 12, tzinfo=UTC)) == {"a": 2 * big, "b": 7}
    # A local time late on 30 November is already December in UTC.
    sp = datetime(2026, 11, 30, 22, tzinfo=timezone(timedelta(hours=-3)))
    assert ledger.month_to_date_cost(sp) == {"b": 5}


@pytest.mark.parametrize(("url", "path"), [
    ("sqlite:///data/llmmeter.db", Path("data/llmmeter.db")),
    ("sqlite:////var/lib/llmmeter.db", Path("/var/lib/llmmeter.db")),
    ("data/plain.db", Path("data/plain.db")),
    ("/abs/plain.db", Path("/abs/plain.db")),
])
def test_sqlite_urls(url: str, path: Path) -> None:
    assert sqlite_path(url) == path


@pytest.mark.parametrize(("url", "message"), [
    ("postgresql://user:secret@db/llmmeter?bogus=1", "not a PostgreSQL URL"),
    ("mysql://db/x", "unsupported ledger URL scheme 'mysql'"),
    ("sqlite://relative.db", "three slashes"),
    ("sqlite:///:memory:", "must name a database file"),
])
def test_unusable_urls_say_why(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as e:
        Ledger(url)
    assert "secret" not in str(e.value)


def test_default_journal_is_next_to_the_database(tmp_path: Path) -> None:
    ledger = Ledger(f"sqlite:///{tmp_path}/d/x.db")
    assert ledger.journal_dir == tmp_path / "d" / "journal"
    assert Ledger(f"sqlite:///{tmp_path}/x.db", journal_dir=tmp_path / "j").journal_dir == tmp_path / "j"


def test_close_deletes_fully_imported_segments(db_url: str, tmp_path: Path) -> None:
    ledger = Ledger(db_url)
    ledger.start()
    ledger.append(full_record(1))
    ledger.close()
    assert list(ledger.journal_dir.iterdir()) == []
    ledger.close()  # twice is harmless


def near(got: dict[str, list[int]], exact: dict[str, list[int]]) -> None:
    """Histogram figures (migration 015): within the stated error of the exact ones, exact below 64."""
    assert set(got) == set(exact)
    for t, figures in got.items():
        for g, w in zip(figures, exact[t], strict=True):
            assert abs(g - w) <= ERROR * w and (w >= 64 or g == w), (t, g, w)


def test_input_side_percentiles_are_nearest_rank_within_the_bucket_error(db_url: str,
                                                                          ledgers: list[Ledger]) -> None:
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    ledger.start()
    for i in range(1, 101):  # input-side tokens 1..100 for one tenant, 7 for another
        ledger.append(full_record(i, tenant="a", input_tokens=i, cache_read_tokens=0, cache_write_tokens=0,
                                  cache_write_1h_tokens=0))
    # 1-hour cache writes are part of the input side (007): 3 + 2 + 2 = 7.
    ledger.append(full_record(1000, tenant="b", input_tokens=3, cache_read_tokens=2, cache_write_tokens=0,
                              cache_write_1h_tokens=2))
    ledger.append(full_record(1001, tenant="b", endpoint="models", input_tokens=999))  # not metered
    assert ledger.flush(10)
    got = ledger.store.input_side_percentiles(*EVER, None, (50, 95, 100))
    near(got, {"a": [50, 95, 100], "b": [7, 7, 7]})
    assert ledger.store.input_side_percentiles(*EVER, "b", (50,)) == {"b": [7]}


@pytest.mark.parametrize("in_time_order", [True, False])
def test_percentiles_across_buckets_and_arrival_orders(db_url: str, ledgers: list[Ledger],
                                                      in_time_order: bool) -> None:
    """Sizes spread over many 1024-token buckets, ties included; rows written in time order
    (read as one rowid run) or shuffled (read through the index); a range that cuts the
    month. The answers must be within the bucket error of nearest-rank computed here."""
    rng = random.Random(7)
    records = [full_record(i, start=T0 + timedelta(minutes=i), tenant=rng.choice("ab"),
                           input_tokens=rng.choice((rng.randrange(1, 300_000), 4096, 1024)),
                           cache_read_tokens=0, cache_write_tokens=rng.randrange(0, 3),
                           cache_write_1h_tokens=rng.choice((0, 0, rng.randrange(1, 5000))))
               for i in range(3000)]
    if not in_time_order:
        rng.shuffle(records)
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    ledger.start()
    for r in records:
        ledger.append(r)
    assert ledger.flush(10)
    percents = (1, 50, 95, 99, 100)

    def nearest_rank(tenant: str, lo: datetime, hi: datetime) -> list[int]:
        sizes = sorted(r.input_tokens + r.cache_write_tokens + r.cache_write_1h_tokens for r in records
                       if r.tenant == tenant and lo <= r.start < hi)
        return [sizes[(len(sizes) * p + 99) // 100 - 1] for p in percents]

    # Most of the rows, then a tenth of them (shuffled, that one is read through the index).
    for lo, hi in ((T0 + timedelta(minutes=100), T0 + timedelta(minutes=2500)),
                   (T0 + timedelta(minutes=1000), T0 + timedelta(minutes=1300))):
        near(ledger.store.input_side_percentiles(lo, hi, None, percents), {t: nearest_rank(t, lo, hi) for t in "ab"})
        near(ledger.store.input_side_percentiles(lo, hi, "b", percents), {"b": nearest_rank("b", lo, hi)})
    assert ledger.store.input_side_percentiles(T0 - timedelta(days=1), T0, None, percents) == {}
    assert ledger.store.cost_by_tenant(lo, hi) == {
        t: sum(r.cost_units or 0 for r in records if r.tenant == t and lo <= r.start < hi) for t in "ab"}


def scan(store: SqliteStore, lo: datetime, hi: datetime, tenant: str | None) -> list[tuple[object, ...]]:
    """HOURLY_SQL straight over the requests table: what the rollup must equal."""
    con = sqlite3.connect(store.path)
    con.row_factory = sqlite3.Row
    try:
        where = "start >= ? AND start < ?" + (" AND tenant = ?" if tenant else "")
        params = (to_micros(lo), to_micros(hi), *((tenant,) if tenant else ()))
        return [HourlyRow.from_sums(r).as_tuple() for r in con.execute(HOURLY_SQL.format(where=where), params)]
    finally:
        con.close()


@pytest.mark.sqlite_only  # PostgreSQL's twin: tests/ledger/test_postgres.py
def test_hourly_rollup_matches_the_requests_and_ignores_duplicates(db_url: str, ledgers: list[Ledger]) -> None:
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    ledger.start()
    for i in range(50):
        ledger.append(full_record(i, start=T0 + timedelta(minutes=17 * i), tenant=("a", "b")[i % 2],
                                  tag=(None, "x")[i % 3 == 0], cost_units=None if i % 7 == 0 else 10 * i))
    ledger.append(full_record(3))  # the same id again: kept once, summed once
    assert ledger.flush(10)
    store = ledger.store
    assert isinstance(store, SqliteStore)
    lo, hi = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)
    rolled = sorted(store.hourly(lo, hi, None))
    scanned = sorted(scan(store, lo, hi, None))
    assert rolled == scanned and sum(r.requests for r in store.hourly_rows(lo, hi, None)) == 50
    con = sqlite3.connect(store.path)
    try:  # migration 015's size histogram counts each metered request once, in its own bucket
        hist = con.execute("SELECT tenant, bucket, SUM(requests) FROM size_histogram WHERE span = 1 "
                           "GROUP BY 1, 2").fetchall()
        bounds = [b for (b,) in con.execute("SELECT lo FROM histogram_bounds ORDER BY lo")]
    finally:
        con.close()
    want: dict[tuple[str, int], int] = {}
    for i in range(50):
        r = full_record(i)
        size = r.input_side_tokens  # 1-hour cache writes included (007)
        key = (("a", "b")[i % 2], max(b for b in bounds if b <= size))
        want[key] = want.get(key, 0) + 1
    assert dict(((t, b), n) for t, b, n in hist) == want
    assert sorted(store.hourly(lo, hi, "a")) == sorted(scan(store, lo, hi, "a"))
    # A range off whole UTC hours (a half-hour zone): its partial first and last hours are
    # summed from the requests themselves, the hours between come from the rollup.
    half = timedelta(minutes=30)
    assert sum(r.requests for r in store.hourly_rows(lo + half, hi + half, None)) == 50
    for a, b in ((datetime(2026, 11, 3, 14, 35, tzinfo=UTC), datetime(2026, 11, 3, 23, 50, tzinfo=UTC)),
                 (datetime(2026, 11, 3, 15, 10, tzinfo=UTC), datetime(2026, 11, 3, 15, 55, tzinfo=UTC))):
        assert sorted(store.hourly(a, b, None)) == sorted(scan(store, a, b, None))
        assert sorted(store.hourly(a, b, "b")) == sorted(scan(store, a, b, "b"))
        assert 0 < sum(r.requests for r in store.hourly_rows(a, b, None)) < 50


def test_batches_of_every_size_go_in_once_each(db_url: str, ledgers: list[Ledger]) -> None:
    # Batches are written as multi-row statements of power-of-two sizes: sizes that need
    # every chunk, with ids already stored mixed in, must each land exactly once.
    ledger = Ledger(db_url, batch_size=1000)
    ledgers.append(ledger)
    ledger.start()
    writer = ledger.store.writer()
    try:
        assert writer.insert_many([full_record(i) for i in range(0, 511)]) == 511
        again = [full_record(i, tenant="dup") for i in range(400, 511)] + [full_record(i) for i in range(511, 900)]
        random.Random(3).shuffle(again)
        assert writer.insert_many(again) == 389
        assert writer.insert_many([]) == 0
    finally:
        writer.close()
    back = list(ledger.rows(*EVER))
    assert [r.id for r in back] == [f"req-{i:08d}" for i in range(900)]
    assert all(r.tenant == "search-team" for r in back) and back[450] == full_record(450)


@pytest.mark.sqlite_only
def test_a_ledger_from_before_migration_004_keeps_exact_rollups_across_the_upgrade(tmp_path: Path) -> None:
    # Rows written while 002/003's row triggers kept the rollups, then the upgrade that
    # drops them, then rows whose batches keep the rollups themselves: no row counted
    # twice or missed, duplicates of old rows included.
    path = tmp_path / "old.db"
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                "applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)")
    for m in load("sqlite")[:3]:
        con.executescript(m.sql)
        con.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", (m.version, m.name))
    old = [full_record(i, start=T0 + timedelta(minutes=13 * i), tenant=("a", "b")[i % 2]) for i in range(40)]
    con.executemany(f"INSERT INTO requests ({', '.join(BEFORE_005)}) VALUES ({', '.join('?' * len(BEFORE_005))})",
                    [[to_row(r)[c] for c in BEFORE_005] for r in old])  # as the old writer did: the triggers count them
    con.close()
    store = SqliteStore(path)
    assert store.migrate() == len(load("sqlite")) - 3  # 004 and those after it
    writer = store.writer()
    new = [full_record(i, start=T0 + timedelta(minutes=13 * i), tenant=("a", "c")[i % 2],
                       endpoint=("chat", "models")[i % 5 == 0]) for i in range(40, 90)]
    assert writer.insert_many(old[30:] + new) == 50
    writer.close()
    lo, hi = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)
    rolled = sorted(store.hourly(lo, hi, None))
    assert rolled == sorted(scan(store, lo, hi, None))
    assert sum(r.requests for r in store.hourly_rows(lo, hi, None)) == 90
    con = sqlite3.connect(path)
    try:
        counted = con.execute("SELECT SUM(requests) FROM size_histogram WHERE span = 24").fetchone()[0]
        triggers = con.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall()
    finally:
        con.close()
    assert counted == 90 - 10 and triggers == []  # models calls are not metered
