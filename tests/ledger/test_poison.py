"""A record the database refuses is set aside, counted and logged; every other record lands
exactly once, the ledger stays healthy, and neither a restart nor an outage mistakes one for
the other. `llmmeter ledger retry` imports dead letters again and keeps what still fails."""

from __future__ import annotations

import fcntl
import logging
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import httpx
import orjson
import pytest

from pricing.calculator import MAX_COST_UNITS, MAX_TOKENS
from proxy.ledger import Ledger
from proxy.ledger.journal import ReadStats, encode, read_segment
from proxy.ledger.record import Record
from proxy.ledger.store import RecordRefused, is_postgresql
from proxy.ledger.store.sqlite import SqliteWriter
from tests.fake_upstream import FakeUpstream
from tests.ledger.helpers import EVER, T0, full_record, wait_until
from tests.ledger.test_money_bounds import execute
from tests.ledger.test_outage import hold_write_lock
from tests.serve import Served

ROOT = Path(__file__).resolve().parents[2]


def poisoned(i: int) -> Record:
    """Three kinds of refusal: the database's own constraint (mid-transaction), a cost beyond the
    caps the money columns are sized for, a token count beyond BIGINT."""
    kind = i % 3
    if kind == 0:
        return full_record(i, tenant=None)  # NOT NULL: refused by the database itself
    if kind == 1:
        return full_record(i, cost_units=MAX_COST_UNITS + 1)  # a price above the ceiling would do this
    return full_record(i, input_tokens=2**63)


def dead_ids(ledger: Ledger) -> list[str]:
    ids: list[str] = []
    for path in sorted(ledger.dead_letter_dir.glob("*.jsonl")):
        ids += [orjson.loads(line)["id"] for line in path.read_bytes().splitlines() if line.strip()]
    return ids


def test_refused_records_among_thousands_are_set_aside_and_every_other_lands_once(
        db_url: str, ledgers: list[Ledger], caplog: pytest.LogCaptureFixture) -> None:
    ledger = Ledger(db_url, batch_size=500)
    ledgers.append(ledger)
    ledger.start()
    bad = {17, 1234, 1235, 2999, 4711}
    records = [poisoned(i) if i in bad else full_record(i) for i in range(5000)]
    records += records[100:110]  # duplicates too: kept once
    with caplog.at_level(logging.ERROR, logger="llmmeter.ledger"):
        for at in range(0, len(records), 250):
            ledger.append_many(records[at:at + 250])
        assert ledger.flush(60)
    assert ledger.healthy and ledger.pending == 0 and ledger.rejected == len(bad)
    want = [full_record(i) for i in range(5000) if i not in bad]
    assert list(ledger.rows(*EVER)) == want  # each exactly once, every field intact
    assert sorted(dead_ids(ledger)) == sorted(full_record(i).id for i in bad)
    hourly = ledger.store.hourly(*EVER, None)
    assert sum(r[9] for r in hourly) == len(want) and sum(r[17] for r in hourly) == sum(
        r.cost_units or 0 for r in want)
    refusals = [r for r in caplog.records if "refused" in r.getMessage()]
    assert refusals and all(r.exc_info is None for r in refusals)  # one line each, no traceback
    assert len(refusals) <= len(bad)
    ledger.close()
    assert not list(ledger.journal_dir.glob("*.jsonl"))  # the poison is in the dead letters, not the journal
    assert oct(next(ledger.dead_letter_dir.iterdir()).stat().st_mode & 0o777) == "0o640"


@pytest.mark.sqlite_only
def test_a_refused_batch_leaves_no_transaction_open(db_url: str, ledgers: list[Ledger]) -> None:
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    ledger.start()
    writer = ledger.store.writer()
    assert isinstance(writer, SqliteWriter)
    try:
        for bad in (full_record(2, tenant=None), full_record(2, input_tokens=2**63 - 1 + 1)):
            with pytest.raises(RecordRefused):
                writer.insert_many([full_record(1), bad, full_record(3)])
            assert not writer.con.in_transaction  # "cannot start a transaction within a transaction" before
        assert writer.insert_many([full_record(1), full_record(3)]) == 2  # the batch was all or nothing
    finally:
        writer.close()
    assert [r.id for r in ledger.rows(*EVER)] == [full_record(1).id, full_record(3).id]


def test_a_refused_record_in_the_journal_never_stops_a_start(db_url: str, tmp_path: Path) -> None:
    """What `serve` and `report` do first: replay. A poisoned journal must not make them exit."""
    journal = tmp_path / "journal"
    journal.mkdir()
    good = [full_record(i) for i in range(20)]
    lines = [encode(r) for r in good[:10]]
    lines.append(orjson.dumps({**orjson.loads(encode(full_record(98))), "tenant": None}) + b"\n")
    lines.append(encode(full_record(99, cost_units=10**30)))  # beyond 64 bits: journaled as a string
    lines += [encode(r) for r in good[10:]]
    (journal / "segment-00000000000000000001-1-abcd0123.jsonl").write_bytes(b"".join(lines))
    ledger = Ledger(db_url, journal_dir=journal)
    try:
        assert ledger.start() == 22
        assert ledger.last_replay.inserted == 20 and ledger.rejected == 2
        assert list(ledger.rows(*EVER)) == good
        assert sorted(dead_ids(ledger)) == [full_record(98).id, full_record(99).id]
    finally:
        ledger.close()
    back = [r for p in sorted((journal / "dead-letter").glob("*.jsonl"))
            for r in read_segment(os.open(p, os.O_RDONLY), ReadStats())]
    assert {r.id: r.cost_units for r in back}[full_record(99).id] == 10**30  # kept exactly, for the retry


def test_an_outage_is_not_a_refusal(db_url: str, ledgers: list[Ledger]) -> None:
    """While the database is locked nothing is set aside: the batch (poison included) waits whole."""
    ledger = Ledger(db_url, busy_timeout_s=0.2)
    ledgers.append(ledger)
    ledger.start()
    release = hold_write_lock(db_url)
    try:
        ledger.append_many([full_record(1), full_record(2, tenant=None), full_record(3)])
        assert wait_until(lambda: not ledger.healthy, timeout=10)
        assert ledger.rejected == 0 and ledger.pending == 3 and ledger.problem is not None
    finally:
        release()
    assert wait_until(lambda: ledger.healthy and ledger.pending == 0, timeout=15)
    assert ledger.rejected == 1 and [r.id for r in ledger.rows(*EVER)] == [full_record(1).id, full_record(3).id]


def test_records_at_the_caps_are_not_refused(db_url: str, ledgers: list[Ledger]) -> None:
    """The price that poisoned every write before (input = "1000000000000000") is now refused by the
    loader; the dearest record the caps allow still lands, twelve at once, on both backends."""
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    ledger.start()
    top = [full_record(i, input_tokens=MAX_TOKENS, cache_read_tokens=MAX_TOKENS, cache_write_tokens=MAX_TOKENS,
                       output_tokens=MAX_TOKENS, reasoning_tokens=MAX_TOKENS, cost_units=MAX_COST_UNITS)
           for i in range(12)]
    ledger.append_many(top)
    assert ledger.flush() and ledger.healthy and ledger.rejected == 0
    assert list(ledger.rows(*EVER)) == top
    [row] = ledger.store.hourly(*EVER, None)
    assert row[9] == 12 and row[17] == 12 * MAX_COST_UNITS and row[10] == 12 * MAX_TOKENS


def llmmeter(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMMETER_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "proxy", *args], capture_output=True, text=True, timeout=60,
                          cwd=cwd, env=env)


def test_ledger_retry_imports_dead_letters_and_keeps_what_still_fails(db_url: str, tmp_path: Path) -> None:
    ledger = Ledger(db_url)
    ledger.start()
    ledger.append_many([full_record(1), full_record(2, tenant=None), full_record(3, tenant=None)])
    assert ledger.flush() and ledger.rejected == 2
    ledger.close()
    dead = ledger.dead_letter_dir
    [first] = dead.glob("*.jsonl")
    # An operator mends one of them (here: gives it a tenant); the other still cannot be stored.
    mended = [orjson.loads(line) for line in first.read_bytes().splitlines()]
    mended[0]["tenant"] = "mended"
    first.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in mended))
    # A file a live process still appends to is left to it.
    busy = dead / "dead-99999999999999999999-1-00000000.jsonl"
    busy.write_bytes(encode(full_record(4)))
    fd = os.open(busy, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        done = llmmeter("ledger", "retry", "--db", db_url, cwd=tmp_path)
    finally:
        os.close(fd)
    assert done.returncode == 1, done.stderr  # something is still refused
    assert "1 imported" in done.stdout and "1 refused again and kept" in done.stdout
    assert "1 file(s) in use" in done.stdout
    assert not first.exists()
    kept = [p for p in dead.glob("*.jsonl") if p != busy]
    assert [orjson.loads(line)["id"] for p in kept for line in p.read_bytes().splitlines()] == [full_record(3).id]
    again = llmmeter("ledger", "retry", "--db", db_url, cwd=tmp_path)  # now the busy one too
    assert again.returncode == 1 and "1 imported" in again.stdout
    reader = Ledger(db_url, read_only=True)
    assert [(r.id, r.tenant) for r in reader.rows(*EVER, None)] == [
        (full_record(1).id, "search-team"), (full_record(2).id, "mended"), (full_record(4).id, "search-team")]


def test_a_batch_whose_rollup_would_overflow_is_refused_not_rounded(db_url: str, ledgers: list[Ledger]) -> None:
    """SQLite's `+` turns an overflow into a REAL: the CHECK on the rollup refuses it instead, as
    PostgreSQL's BIGINT does by itself. (Only past the bound: 9.2e8 dearest records in one hour.)"""
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    ledger.start()
    ledger.append(full_record(0))
    assert ledger.flush()
    execute(db_url, "UPDATE hourly_rollup SET cost_usd = 9223372036854775807 - 10")
    ledger.append(full_record(1, start=T0 + timedelta(seconds=1)))  # the same hour and key
    assert ledger.flush() and ledger.healthy and ledger.rejected == 1
    assert [r.id for r in ledger.rows(*EVER)] == [full_record(0).id]
    if not is_postgresql(db_url):
        assert execute(db_url, "SELECT typeof(cost_usd), typeof(cost_units) FROM hourly_rollup") == [
            ("integer", "integer")]


def test_a_served_ledger_counts_what_it_sets_aside_and_stays_ready(
        fake: FakeUpstream, prices_dir: Path, tmp_path: Path) -> None:
    """A crashed process left a journal with a record no database takes: `serve` starts anyway,
    sets it aside, says how many, and stays ready."""
    work = tmp_path / "w"
    (work / "journal").mkdir(parents=True)
    poison = orjson.dumps({**orjson.loads(encode(full_record(1))), "tenant": None}) + b"\n"
    (work / "journal" / "segment-00000000000000000001-1-abcd0123.jsonl").write_bytes(
        encode(full_record(0)) + poison + encode(full_record(2)))
    proxy = Served(work, upstream=fake.base_url, args=("--prices", str(prices_dir))).start()
    try:
        r = httpx.get(proxy.url + "/readyz", timeout=5)
        assert r.status_code == 200 and r.json()["rejected_records"] == 1
        assert proxy.metric("llmmeter_ledger_rejected_records_total") == 1
        assert proxy.metric("llmmeter_ledger_lost_records_total") == 0
        assert [row["id"] for row in proxy.rows(expect=2)] == [full_record(0).id, full_record(2).id]
        assert "refused 1 record(s)" in proxy.output()
    finally:
        proxy.stop()


def test_several_workers_add_up_what_they_set_aside(fake: FakeUpstream, prices_dir: Path, tmp_path: Path) -> None:
    """With --workers, each worker publishes its own count into the shared metric files."""
    work, metrics_dir = tmp_path / "w", tmp_path / "prom"
    (work / "journal").mkdir(parents=True)
    metrics_dir.mkdir()
    lines = [orjson.dumps({**orjson.loads(encode(full_record(i))), "tenant": None}) + b"\n" for i in range(3)]
    (work / "journal" / "segment-00000000000000000001-1-abcd0123.jsonl").write_bytes(b"".join(lines))
    proxy = Served(work, upstream=fake.base_url, args=("--prices", str(prices_dir), "--workers", "2"),
                   env={"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}).start()
    try:
        assert wait_until(lambda: proxy.metric("llmmeter_ledger_rejected_records_total") == 3, timeout=10)
        assert proxy.metric("llmmeter_ledger_lost_records_total") == 0
    finally:
        proxy.stop()
