"""A journal segment names the ledger it was written for: replay into another ledger is refused
and the segment is set aside; segments from before ledger ids are taken once by the ledger that
finds them; PostgreSQL replicas journal in folders of their own, and a restart still replays
what a replica left."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest

from proxy.ledger import Ledger
from proxy.ledger.journal import create_locked, encode, label_of
from proxy.ledger.layout import default_replica
from proxy.ledger.record import Record
from proxy.ledger.store import LEDGER_ID
from tests.fake_upstream import FakeUpstream
from tests.ledger.helpers import EVER, full_record, wait_until
from tests.ledger.test_replaced import CHAT, USAGE
from tests.pg import PgCluster
from tests.serve import Served, pg_rows


def left_behind(directory: Path, ledger_id: str | None, records: Sequence[Record]) -> Path:
    """A segment as a writer that died leaves it: whole lines, its flock gone with the process."""
    fd, path = create_locked(directory, "segment", ledger_id)
    try:
        os.write(fd, b"".join(encode(r) for r in records))
    finally:
        os.close(fd)
    return path


def test_a_ledger_has_one_id_and_every_segment_names_it(db_url: str, ledgers: list[Ledger]) -> None:
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    ledger.start()
    ledger_id = ledger.ledger_id
    assert ledger_id is not None and LEDGER_ID.match(ledger_id) and ledger.store.ledger_id() == ledger_id
    ledger.append(full_record(1))
    [segment] = ledger.journal_dir.glob("*.jsonl")
    assert segment.name.endswith(f".{ledger_id}.jsonl") and label_of(segment) == ledger_id
    again = Ledger(db_url)  # the id is the database's: every process opening it reads the same one
    ledgers.append(again)
    again.start()
    assert again.ledger_id == ledger_id


def test_segments_of_another_ledger_are_set_aside_and_never_imported(
        db_url: str, other_db_url: str, tmp_path: Path, ledgers: list[Ledger],
        caplog: pytest.LogCaptureFixture) -> None:
    journal = tmp_path / "shared-journal"  # one `ledger.journal_dir` given to two ledgers
    first = Ledger(db_url, journal)
    first.start()
    first_id = first.ledger_id
    first.close()
    segment = left_behind(journal, first_id, [full_record(i) for i in range(5)])
    second = Ledger(other_db_url, journal)
    ledgers.append(second)
    with caplog.at_level(logging.ERROR, logger="llmmeter.ledger"):
        assert second.start() == 0
    assert second.count(*EVER) == 0
    assert second.last_replay.foreign == 1 and second.last_replay.segments == 0
    aside = journal / "foreign" / segment.name
    assert not segment.exists() and aside.exists()
    assert second.ledger_id != first_id
    assert f"written for ledger {first_id}, not for this ledger {second.ledger_id}: replay refused" in caplog.text
    second.close()
    assert Ledger(other_db_url, journal).start() == 0 and aside.exists()  # aside stays aside
    # Moved back into the journal of the ledger it was written for, it lands there.
    os.rename(aside, segment)
    back = Ledger(db_url, journal)
    ledgers.append(back)
    assert back.start() == 5 and back.count(*EVER) == 5 and not segment.exists()


def test_a_segment_from_before_ledger_ids_is_replayed_once_into_the_ledger_that_finds_it(
        db_url: str, ledgers: list[Ledger], caplog: pytest.LogCaptureFixture) -> None:
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    # Before start: the folder every journal of this ledger is under, where older llmmeters wrote theirs.
    segment = left_behind(ledger.journal_dir, None, [full_record(i) for i in range(3)])
    with caplog.at_level(logging.WARNING, logger="llmmeter.ledger"):
        assert ledger.start() == 3
    assert ledger.last_replay.unlabelled == 1 and ledger.count(*EVER) == 3 and not segment.exists()
    assert f"names no ledger (written before ledgers had ids): taken as this ledger's ({ledger.ledger_id})" \
        in caplog.text
    ledger.close()
    again = Ledger(db_url)
    ledgers.append(again)
    assert again.start() == 0 and again.count(*EVER) == 3


def test_postgresql_replicas_on_one_host_journal_in_folders_of_their_own(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ledgers: list[Ledger]) -> None:
    monkeypatch.chdir(tmp_path)
    a, b, default = Ledger(pg_url, replica="a"), Ledger(pg_url, replica="b"), Ledger(pg_url)
    ledgers.extend((a, b, default))
    assert a.journal_dir == tmp_path / "data" / "journal"  # until start() has read the ledger's id
    for i, ledger in enumerate((a, b, default)):
        ledger.start()
        ledger.append(full_record(i))
    assert a.ledger_id is not None
    root = tmp_path / "data" / "journal" / a.ledger_id
    assert (a.journal_dir, b.journal_dir, default.journal_dir) == (root / "a", root / "b", root / default_replica())
    assert default_replica().endswith(f"-{os.getpid()}")
    assert a.dead_letter_dir == b.dead_letter_dir == root / "dead-letter"
    for ledger in (a, b, default):
        [segment] = ledger.journal_dir.glob("*.jsonl")
        assert label_of(segment) == a.ledger_id
    given = Ledger(pg_url, journal_dir=tmp_path / "mine")  # `ledger.journal_dir` is taken as it is
    ledgers.append(given)
    given.start()
    assert given.journal_dir == tmp_path / "mine" and given.dead_letter_dir == tmp_path / "mine" / "dead-letter"


def test_a_restarted_replica_replays_what_it_left_under_its_former_name(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ledgers: list[Ledger]) -> None:
    monkeypatch.chdir(tmp_path)
    live = Ledger(pg_url, replica="host-222")  # a replica that goes on serving: its segments are its own
    ledgers.append(live)
    live.start()
    live.append(full_record(100))
    first = Ledger(pg_url, replica="host-111")
    first.start()
    ledger_id = first.ledger_id
    first.close()
    former = first.journal_dir
    segment = left_behind(former, ledger_id, [full_record(i) for i in range(5)])  # killed: its segment stayed
    restarted = Ledger(pg_url, replica="host-333")  # the first one again, with a new pid
    ledgers.append(restarted)
    assert restarted.start() == 5 and restarted.last_replay.busy == 1
    assert not segment.exists() and not former.exists()  # imported, and the emptied folder removed
    assert list(live.journal_dir.glob("*.jsonl")) != []
    assert live.flush() and restarted.count(*EVER) == 6


def test_replicas_killed_then_fresh_ones_on_a_new_database_import_nothing_of_the_old_run(
        fake: FakeUpstream, pg_cluster: PgCluster, pg_url: str, prices_dir: Path, tmp_path: Path) -> None:
    """The issue's run: two replicas on PostgreSQL, killed; two fresh ones started from the same
    working directory (so the same ./data/journal) against a new, empty database."""
    work = tmp_path / "replicas"
    work.mkdir()

    def replica(db: str) -> Served:
        return Served(work, upstream=fake.base_url, db=db, args=("--prices", str(prices_dir))).start()

    def call(proxies: Sequence[Served], n: int) -> None:
        for i in range(n):
            r = httpx.post(proxies[i % len(proxies)].base_url + "/chat/completions", json=CHAT, headers=USAGE,
                           timeout=10)
            assert r.status_code == 200

    old = [replica(pg_url) for _ in range(2)]
    try:
        call(old, 40)
        assert wait_until(lambda: len(pg_rows(pg_url)) == 40)
    finally:
        for p in old:
            p.kill()
    journal = work / "data" / "journal"
    leftover = sorted(journal.rglob("*.jsonl"))
    assert len(leftover) == 2  # each killed replica's open segment, in a folder of its own
    assert len({p.parent for p in leftover}) == 2
    new_url = pg_cluster.create_database()
    try:
        fresh = [replica(new_url) for _ in range(2)]
        try:
            assert pg_rows(new_url) == []  # the journal is replayed before a replica is ready
            call(fresh, 10)
            assert wait_until(lambda: len(pg_rows(new_url)) == 10)
            assert all(p.exists() for p in leftover)  # never imported, never deleted
            assert "segment(s) of ledger" in fresh[0].output() and "left alone" in fresh[0].output()
        finally:
            for p in fresh:
                p.stop()
        assert len(pg_rows(new_url)) == 10
    finally:
        pg_cluster.drop_database(new_url)
    # The old run's ledger still takes them: a replica restarted on it replays the dead ones' folders.
    again = replica(pg_url)
    try:
        assert not any(p.exists() for p in leftover)
        rows = pg_rows(pg_url)
        assert len(rows) == 40 and len({r["id"] for r in rows}) == 40
    finally:
        again.stop()
