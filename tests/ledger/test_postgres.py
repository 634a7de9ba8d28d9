"""PostgreSQL ledger: its schema and migrations, the same answers as SQLite, several writers
at once, and a server that goes away and comes back."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from proxy.ledger import Ledger
from proxy.ledger.migrations import load
from proxy.ledger.record import Record
from proxy.ledger.store import COLUMNS, HourlyRow, StoreUnavailable, open_store
from proxy.ledger.store.histograms import ERROR
from proxy.ledger.store.postgres import PostgresStore
from proxy.ledger.store.rows import to_micros
from proxy.ledger.store.sql import HOURLY_SQL
from tests.ledger.helpers import EVER, T0, full_record, wait_until
from tests.pg import MISSING, new_cluster, usable
from tests.serve import free_port
from tests.strict import require

ROOT = Path(__file__).resolve().parents[2]


def rows(url: str, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    with psycopg.connect(url) as con:
        return con.execute(sql.encode(), params).fetchall()


def named_rows(url: str, sql: str, params: tuple[object, ...] = ()) -> list[dict[str, object]]:
    with psycopg.connect(url, row_factory=psycopg.rows.dict_row) as con:
        return con.execute(sql.encode(), params).fetchall()


def test_migration_versions_are_in_step_across_dialects() -> None:
    lite, pg = load("sqlite"), load("postgresql")
    assert [(m.version, m.name) for m in lite] == [(m.version, m.name) for m in pg]
    assert [m.version for m in pg] == list(range(1, pg[-1].version + 1))
    shared = [a for a, b in zip(lite, pg, strict=True) if a.sql == b.sql]
    assert shared and len(shared) < len(lite)  # 001 is shared; 002's trigger is per dialect
    assert "plpgsql" in pg[1].sql and "plpgsql" not in lite[1].sql


def test_schema_matches_the_record_and_sqlite(pg_url: str, tmp_path: Path) -> None:
    ledger = Ledger(pg_url, journal_dir=tmp_path / "j")
    assert ledger.start() == 0
    ledger.close()
    cols = [c for (c,) in rows(pg_url, "SELECT column_name FROM information_schema.columns "
                                       "WHERE table_name = 'requests' ORDER BY ordinal_position")]
    assert cols == list(COLUMNS)  # in the table's order: 005's cost_carry before 007's columns
    assert sorted(COLUMNS) == sorted([*(f.name for f in fields(Record)), "cost_carry"])
    versions = rows(pg_url, "SELECT version, name FROM schema_migrations ORDER BY version")
    assert versions == [(m.version, m.name) for m in load("sqlite")]
    indexes = {i for (i,) in rows(pg_url, "SELECT indexname FROM pg_indexes WHERE tablename = 'requests'")}
    assert {"requests_start", "requests_tenant_start", "requests_uncertain"} <= indexes
    triggers = {t for (t,) in rows(pg_url, "SELECT tgname FROM pg_trigger WHERE tgrelid = 'requests'::regclass")}
    assert "requests_hourly_rollup" in triggers
    assert open_store(pg_url).migrate() == 0


_MIGRATOR = textwrap.dedent("""
    import sys, time
    from proxy.ledger.store import open_store
    url, go = sys.argv[1], float(sys.argv[2])
    time.sleep(max(0.0, go - time.time()))
    print(open_store(url).migrate())
""")


def test_concurrent_migrations_from_several_processes_apply_each_once(pg_url: str) -> None:
    go = time.time() + 1.5  # all four start migrating at the same moment
    procs = [subprocess.Popen([sys.executable, "-c", _MIGRATOR, pg_url, str(go)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT) for _ in range(4)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err for _, err in outs]
    assert sorted(int(out) for out, _ in outs) == [0, 0, 0, len(load("postgresql"))]
    assert [v for (v,) in rows(pg_url, "SELECT version FROM schema_migrations ORDER BY version")] == [
        m.version for m in load("postgresql")]


def mixed_records(n: int, seed: int = 3) -> list[Record]:
    """Records over several hours, tenants, models (some unpriced), tags, endpoints and outcomes."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        out.append(full_record(
            i, start=T0 + timedelta(seconds=rng.randrange(0, 5 * 86400)), tenant=rng.choice("abc"),
            model=rng.choice(("kimi-k3.1-pro", None)), tier=rng.choice(("standard", "highspeed", None)),
            tag=rng.choice(("x", None)), workload=rng.choice(("short", "long", None)),
            endpoint=rng.choice(("chat", "messages", "models", "other")),
            outcome=rng.choice(("ok", "rejected", "client_closed")),
            usage_source=rng.choice(("upstream", "estimated")), reasoning_tokens=rng.choice((None, 7)),
            input_tokens=rng.choice((rng.randrange(0, 200_000), 4096)), cache_read_tokens=rng.randrange(0, 3),
            cache_write_tokens=0, cost_units=rng.choice((None, rng.randrange(0, 10**15))),
            # Version 2 (007): bands in the rollup's key, fees and provider cost summed in two parts.
            cache_write_1h_tokens=rng.choice((0, rng.randrange(0, 50_000))), web_search_calls=rng.randrange(0, 4),
            price_band=rng.choice((None, 0, 200_000)), fee_units=rng.choice((None, 0, rng.randrange(0, 10**13))),
            provider_cost_units=rng.choice((None, rng.randrange(0, 10**15))),
            stream=rng.random() < 0.7, ttft_ms=rng.choice((None, rng.randrange(0, 3000))),
            duration_ms=rng.randrange(0, 6000), output_tokens=rng.randrange(0, 5000)))
    return out


def test_same_answers_as_sqlite(pg_url: str, tmp_path: Path, ledgers: list[Ledger]) -> None:
    """The same records in both backends: every read the ledger and the report make agrees."""
    records = mixed_records(2000)
    pg = Ledger(pg_url, journal_dir=tmp_path / "pj")
    lite = Ledger(f"sqlite:///{tmp_path / 'l.db'}")
    ledgers.extend((pg, lite))
    for ledger in (pg, lite):
        ledger.start()
        for r in [*records, records[5]]:  # one id twice
            ledger.append(r)
        assert ledger.flush(20)
    assert isinstance(pg.store, PostgresStore)
    percents = tuple(range(1, 101))  # every percent: float rounding would put some a rank off
    whole = (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))
    half = (whole[0] + timedelta(days=3, minutes=30), whole[1] - timedelta(days=20, minutes=30))
    for lo, hi in (whole, half, EVER):
        for tenant in (None, "b"):
            assert sorted(pg.store.hourly(lo, hi, tenant)) == sorted(lite.store.hourly(lo, hi, tenant))
            assert sorted(pg.store.hourly_rows(lo, hi, tenant), key=HourlyRow.as_tuple) == \
                sorted(lite.store.hourly_rows(lo, hi, tenant), key=HourlyRow.as_tuple)
            assert pg.store.input_side_percentiles(lo, hi, tenant, percents) == \
                lite.store.input_side_percentiles(lo, hi, tenant, percents)
            assert pg.count(lo, hi, tenant) == lite.count(lo, hi, tenant)
            assert list(pg.rows(lo, hi, tenant)) == list(lite.rows(lo, hi, tenant))
            assert pg.store.speed(lo, hi, tenant) == lite.store.speed(lo, hi, tenant)
        assert pg.store.cost_by_tenant(lo, hi) == lite.store.cost_by_tenant(lo, hi)
    assert sum(r.requests for r in pg.store.hourly_rows(*whole, None)) == len(records)
    assert {r.price_band for r in pg.store.hourly_rows(*whole, None)} == {0, 200_000}
    assert sum(r.provider_costed for r in pg.store.hourly_rows(*whole, None)) == sum(
        r.provider_cost_units is not None for r in records)
    assert sum(r.requests for r in pg.store.speed(*whole)) > 100
    # The half-hour range is summed from the requests (HOURLY_SQL); the whole month from the rollup.
    where = "start >= %s AND start < %s"
    scanned = named_rows(pg_url, HOURLY_SQL.format(where=where), (to_micros(whole[0]), to_micros(whole[1])))
    assert sorted(HourlyRow.from_sums(r).as_tuple() for r in scanned) == sorted(pg.store.hourly(*whole, None))
    # Nearest rank computed here: each figure within the histogram's stated error of it.
    sizes = sorted(r.input_side_tokens for r in records
                   if r.tenant == "b" and r.endpoint in ("chat", "messages"))
    got = pg.store.input_side_percentiles(*EVER, "b", (7, 50, 95, 100))
    for figure, p in zip(got["b"], (7, 50, 95, 100), strict=True):
        exact = sizes[(len(sizes) * p + 99) // 100 - 1]
        assert abs(figure - exact) <= ERROR * exact, (p, figure, exact)


def test_rows_stream_through_a_server_side_cursor(pg_url: str, ledgers: list[Ledger], tmp_path: Path) -> None:
    ledger = Ledger(pg_url, journal_dir=tmp_path / "j", batch_size=1000)
    ledgers.append(ledger)
    ledger.start()
    for i in range(3000):
        ledger.append(full_record(i))
    assert ledger.flush(20)
    it = ledger.rows(*EVER)
    assert next(it).id == full_record(0).id
    # The reading session holds a cursor on the server and fetches from it in pages.
    reading = "SELECT state, query FROM pg_stat_activity WHERE query LIKE '%%llmmeter_rows%%' " \
              "AND pid != pg_backend_pid()"
    [(state, query)] = rows(pg_url, reading)
    assert state == "idle in transaction" and isinstance(query, str)
    assert query.startswith('FETCH FORWARD 1024 FROM "llmmeter_rows"')
    assert sum(1 for _ in it) == 2999
    assert rows(pg_url, reading) == []  # the reading connection is closed once the rows are read


def test_writers_in_parallel_record_everything_once_without_deadlocks(pg_url: str, tmp_path: Path,
                                                                     ledgers: list[Ledger]) -> None:
    """Three ledgers insert overlapping records (a third of the ids twice) in different orders:
    the rollup rows they share are locked in one order, so nothing deadlocks or is counted twice."""
    records = mixed_records(3000, seed=11)
    parts = [records[0:1500], records[1000:2500], records[1500:3000] + records[:500]]
    writers = [Ledger(pg_url, journal_dir=tmp_path / f"j{i}", batch_size=100) for i in range(3)]
    ledgers.extend(writers)
    for w in writers:
        w.start()
    for part in parts[1:]:
        random.Random(len(part)).shuffle(part)

    def feed(w: Ledger, part: list[Record]) -> None:
        for r in part:
            w.append(r)

    threads = [threading.Thread(target=feed, args=(w, p)) for w, p in zip(writers, parts, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(w.flush(30) for w in writers)
    assert writers[0].count(*EVER) == 3000
    whole = (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))
    rolled = writers[0].store.hourly_rows(*whole, None)
    assert sum(r.requests for r in rolled) == 3000
    assert sum(r.cost_units for r in rolled) == sum(r.cost_units or 0 for r in records)
    [(deadlocks,)] = rows(pg_url, "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
    assert deadlocks == 0


def test_a_record_the_database_refuses_is_set_aside_and_the_rest_land(pg_url: str, tmp_path: Path,
                                                                     ledgers: list[Ledger]) -> None:
    ledger = Ledger(pg_url, journal_dir=tmp_path / "j")
    ledgers.append(ledger)
    ledger.start()
    ledger.append(full_record(1))
    ledger.append(full_record(2, input_tokens=2**70))  # beyond BIGINT
    ledger.append(full_record(3, model_requested="kimi\x00k3"))  # PostgreSQL text holds no NUL
    assert wait_until(lambda: ledger.pending == 0)
    assert ledger.healthy
    got = {r.id: r for r in ledger.rows(*EVER)}
    assert sorted(got) == [full_record(1).id, full_record(3).id]
    assert got[full_record(3).id].model_requested == "kimi\ufffdk3"


def test_default_journal_is_under_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert Ledger("postgresql://llmmeter@db.internal/llmmeter").journal_dir == tmp_path / "data" / "journal"
    assert Ledger("postgres://u@h/d", journal_dir=tmp_path / "j").journal_dir == tmp_path / "j"
    assert Ledger("postgresql+psycopg://u@h/d").store.default_journal_dir() == tmp_path / "data" / "journal"


def test_an_unreachable_server_is_store_unavailable_without_the_password(tmp_path: Path) -> None:
    ledger = Ledger(f"postgresql://llmmeter:hunter2@127.0.0.1:{free_port()}/llmmeter", journal_dir=tmp_path)
    with pytest.raises(StoreUnavailable) as e:
        ledger.start()
    assert "127.0.0.1" in str(e.value) and "hunter2" not in str(e.value)
    assert "hunter2" not in repr(e.value.__cause__)


def test_records_wait_while_the_server_is_down_and_land_when_it_is_back(tmp_path: Path) -> None:
    """A real outage: the server stops (its connections die) and later starts on the same port."""
    require(usable(), MISSING)
    cluster = new_cluster()
    try:
        url = cluster.url()
        ledger = Ledger(url, journal_dir=tmp_path / "j", busy_timeout_s=1)
        ledger.start()
        ledger.append(full_record(0))
        assert ledger.flush(10)
        cluster.stop()
        for i in range(1, 51):
            ledger.append(full_record(i))
        assert wait_until(lambda: not ledger.healthy, timeout=10)
        assert ledger.pending == 50 and ledger.journal_ok
        with pytest.raises(StoreUnavailable):
            ledger.count(*EVER)
        cluster.start()
        assert wait_until(lambda: ledger.healthy and ledger.pending == 0, timeout=20)
        assert ledger.count(*EVER) == 51
        # A connection the server cuts (an admin, a failover) is retried the same way.
        rows(url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                  "WHERE application_name = 'llmmeter' AND pid != pg_backend_pid()")
        for i in range(51, 61):
            ledger.append(full_record(i))
        assert ledger.flush(20)
        assert ledger.count(*EVER) == 61
        ledger.close()
    finally:
        cluster.remove()
    assert not os.listdir(tmp_path / "j")
