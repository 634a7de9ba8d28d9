"""`llmmeter ledger adopt`: segments set aside as another ledger's are imported on request, once."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import orjson
import psycopg
import pytest

from pricing.calculator import MAX_COST_UNITS
from proxy.errors import ConfigError
from proxy.ledger import Ledger
from proxy.ledger.journal import encode
from proxy.ledger.retention import prune
from proxy.ledger.store import open_store
from tests.fake_upstream import FakeUpstream
from tests.ledger.helpers import EVER, full_record, wait_until
from tests.ledger.test_journal_binding import left_behind
from tests.serve import Served


def _set_aside(db_url: str, other_db_url: str, journal: Path, n: int) -> tuple[Path, Ledger]:
    """A segment of `db_url`'s ledger left in a journal that `other_db_url`'s ledger then starts on:
    set aside in foreign/. Returns where it went and the (closed) second ledger."""
    first = Ledger(db_url, journal)
    first.start()
    first_id = first.ledger_id
    first.close()
    segment = left_behind(journal, first_id, [full_record(i) for i in range(n)])
    second = Ledger(other_db_url, journal)
    second.start()
    second.append(full_record(0))  # one record the second ledger already holds: never doubled
    assert second.flush()
    second.close()
    aside = journal / "foreign" / segment.name
    assert aside.exists() and second.count(*EVER) == 1
    return aside, second


def _rollup_requests(ledger: Ledger) -> int:
    return sum(row.requests for row in ledger.store.hourly_rows(*EVER, None))


def test_adopt_imports_a_foreign_segment_once_and_keeps_the_rollups_right(
        db_url: str, other_db_url: str, tmp_path: Path, ledgers: list[Ledger]) -> None:
    journal = tmp_path / "shared-journal"
    aside, _ = _set_aside(db_url, other_db_url, journal, 5)
    ledger = Ledger(other_db_url, journal)
    ledgers.append(ledger)
    stats = ledger.adopt()
    assert (stats.segments, stats.records, stats.inserted) == (1, 5, 4)
    assert not aside.exists() and (aside.parent / "adopted" / aside.name).exists()
    assert ledger.count(*EVER) == 5 and _rollup_requests(ledger) == 5
    again = Ledger(other_db_url, journal).adopt()  # nothing left to adopt: nothing changes
    assert (again.segments, again.records, again.inserted) == (0, 0, 0)
    assert ledger.count(*EVER) == 5 and _rollup_requests(ledger) == 5
    # A start neither replays nor sets aside what was adopted.
    restarted = Ledger(other_db_url, journal)
    ledgers.append(restarted)
    restarted.start()
    assert restarted.last_replay.records == 0 and restarted.foreign_waiting == 0
    assert restarted.count(*EVER) == 5


def test_adopting_a_named_segment_twice_imports_it_once(
        db_url: str, other_db_url: str, tmp_path: Path) -> None:
    journal = tmp_path / "shared-journal"
    aside, _ = _set_aside(db_url, other_db_url, journal, 3)
    copy = tmp_path / aside.name  # the operator kept a copy and adopts that one too
    copy.write_bytes(aside.read_bytes())
    first = Ledger(other_db_url, journal).adopt([aside])
    second = Ledger(other_db_url, journal).adopt([copy])
    assert (first.inserted, second.records, second.inserted) == (2, 3, 0)
    ledger = Ledger(other_db_url, journal, read_only=True)
    assert ledger.count(*EVER) == 3 and _rollup_requests(ledger) == 3


def test_adopting_a_segment_again_after_its_month_was_pruned_does_not_bill_it_twice(
        db_url: str, other_db_url: str, tmp_path: Path) -> None:
    journal = tmp_path / "shared-journal"
    aside, _ = _set_aside(db_url, other_db_url, journal, 3)  # November 2026 records
    copy = tmp_path / aside.name  # the operator kept a copy (or a backup brings the segment back)
    copy.write_bytes(aside.read_bytes())
    Ledger(other_db_url, journal).adopt([aside])
    ledger = Ledger(other_db_url, journal, read_only=True)
    assert _rollup_requests(ledger) == 3
    pruned = prune(open_store(other_db_url), "2026-12", apply=True, now=datetime(2026, 12, 7, tzinfo=UTC))
    assert [m.rows for m in pruned] == [3]
    stats = Ledger(other_db_url, journal).adopt([copy])
    # The month's totals are the rollup's: each record counts once, as before the prune.
    assert _rollup_requests(Ledger(other_db_url, journal, read_only=True)) == 3
    # Its records are left out, said, and kept: the copy stays where it was, nothing is lost.
    assert (stats.inserted, stats.pruned, stats.segments) == (0, 3, 0) and copy.exists()
    assert "3 record(s) of pruned months left out" in stats.summary()


def test_adopt_refuses_a_file_that_is_not_a_segment(tmp_path: Path, other_db_url: str) -> None:
    wrong = tmp_path / "notes.txt"
    wrong.write_text("x")
    with pytest.raises(ConfigError, match="not a journal segment"):
        Ledger(other_db_url, tmp_path / "journal").adopt([wrong])


@pytest.mark.sqlite_only
def test_the_command_adopts_and_serve_names_it_while_foreign_segments_wait(
        db_url: str, other_db_url: str, tmp_path: Path, fake: FakeUpstream, serve: Callable[..., Served]) -> None:
    db = Path(other_db_url.removeprefix("sqlite:///"))
    aside, _ = _set_aside(db_url, other_db_url, db.parent / "journal", 4)  # where serve's journal is
    served = serve(upstream=fake.base_url, db=other_db_url)
    assert wait_until(lambda: "llmmeter ledger adopt" in served.output())
    assert "1 segment(s) of another ledger wait in foreign/" in served.output()
    r = served.cli("ledger", "adopt", "--db", other_db_url)  # while serve writes to the same ledger
    assert r.returncode == 0, r.stderr
    assert "adopted 1 segment(s): 4 record(s), 3 new, 1 already in the ledger" in r.stdout
    assert Ledger(other_db_url, read_only=True).count(*EVER) == 4 and not aside.exists()
    r = served.cli("ledger", "adopt", "--db", other_db_url)
    assert r.returncode == 0 and "adopted 0 segment(s)" in r.stdout


def test_a_record_the_database_refuses_is_set_aside_and_not_called_already_in_the_ledger(
        db_url: str, other_db_url: str, tmp_path: Path, ledgers: list[Ledger]) -> None:
    journal = tmp_path / "shared-journal"
    first = Ledger(db_url, journal)
    first.start()
    first_id = first.ledger_id
    first.close()
    refused = full_record(2, cost_units=MAX_COST_UNITS + 1)  # beyond the money columns' cap
    segment = left_behind(journal, first_id, [full_record(0), full_record(1), refused])
    second = Ledger(other_db_url, journal)
    ledgers.append(second)
    second.start()
    aside = journal / "foreign" / segment.name
    assert aside.exists()
    stats = second.adopt()
    assert (stats.records, stats.inserted, stats.refused) == (3, 2, 1)
    assert "0 already in the ledger" in stats.summary() and "1 refused by the database" in stats.summary()
    assert [orjson.loads(line)["id"] for p in second.dead_letter_dir.glob("*.jsonl")
            for line in p.read_bytes().splitlines()] == [refused.id]


def test_a_segment_with_an_endless_line_is_read_in_bounded_memory(tmp_path: Path, ledgers: list[Ledger]) -> None:
    """A crafted segment in foreign/ with one line of 48 MiB and no newline among its records: the
    line was held whole and re-joined for every MiB read (0.5 GB held and 15 s of CPU for 256 MiB).
    Now it is skipped as it is read; the records around it are adopted."""
    db = f"sqlite:///{tmp_path / 'data' / 'ledger.db'}"
    journal = tmp_path / "journal"
    ledger = Ledger(db, journal)
    ledgers.append(ledger)
    ledger.start()
    foreign = journal / "foreign"
    foreign.mkdir()
    crafted = foreign / "segment-00000000000000000001-1-deadbeef.jsonl"
    with crafted.open("wb") as f:
        f.write(encode(full_record(1)))
        f.write(b'{"id": "' + b"a" * (48 << 20))
        f.write(b'"}\n' + encode(full_record(2)) + b'{"id": "' + b"b" * (3 << 20))  # ends torn, overlong too
    tracemalloc.start()
    try:
        stats = ledger.adopt([crafted])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (stats.records, stats.inserted, stats.skipped_lines) == (2, 2, 2)
    assert peak < 8 << 20, f"peak {peak >> 20} MiB while adopting"
    assert ledger.count(*EVER) == 2


def _partitions(db_url: str) -> int:
    with psycopg.connect(db_url) as con:
        row = con.execute("SELECT COUNT(*) FROM pg_inherits WHERE inhparent = 'requests'::regclass").fetchone()
        return int(row[0]) if row else 0


def test_records_from_the_future_or_the_distant_past_are_refused(
        db_url: str, tmp_path: Path, ledgers: list[Ledger]) -> None:
    """A crafted segment whose records start in 400 different months, from year 1 to year 9000:
    on PostgreSQL each month was a new partition of requests, which every later query over
    requests plans and locks (a few thousand such months and every import fails with 'out of
    shared memory'). No record llmmeter makes starts before 2000 or after the present: such
    records are refused and kept as dead letters; the segment's real record is adopted."""
    journal = tmp_path / "journal"
    ledger = Ledger(db_url, journal)
    ledgers.append(ledger)
    ledger.start()
    partitions = _partitions(db_url) if db_url.startswith("postgresql") else 0
    foreign = journal / "foreign"
    foreign.mkdir()
    crafted = foreign / "segment-00000000000000000001-1-deadbeef.jsonl"
    far = [datetime(1 if i % 2 else 9000 - i, 1 + i % 12, 1, tzinfo=UTC) for i in range(400)]
    crafted.write_bytes(b"".join(encode(full_record(i, start=at, budget_leases=None)) for i, at in enumerate(far))
                        + encode(full_record(1000, start=datetime(2026, 11, 3, tzinfo=UTC), budget_leases=None)))
    stats = ledger.adopt([crafted])
    assert (stats.records, stats.inserted) == (401, 1)
    assert ledger.count(*EVER) == 1
    if db_url.startswith("postgresql"):
        assert _partitions(db_url) <= partitions + 1  # at most November 2026's
