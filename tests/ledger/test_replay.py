"""A killed process loses nothing it appended: the next start replays the journal, once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson

from proxy.ledger import Ledger
from tests.ledger.helpers import EVER, full_record, wait_until

# Appends, commits only the first `committed`, then dies without closing anything.
_CRASHER = textwrap.dedent("""
    import os, sys
    from proxy.ledger import Ledger
    from tests.ledger.helpers import full_record
    url, n, committed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ledger = Ledger(url, batch_size=10**9, flush_interval_s=3600)
    ledger.start()
    for i in range(committed):
        ledger.append(full_record(i))
    assert ledger.flush(10)
    for i in range(committed, n):
        ledger.append(full_record(i))
    os._exit(0)
""")


def _crash(url: str, n: int, committed: int = 0) -> None:
    root = Path(__file__).resolve().parents[2]
    # The test's own working directory: a PostgreSQL ledger journals under it.
    env = {**os.environ, "PYTHONPATH": str(root)}
    subprocess.run([sys.executable, "-c", _CRASHER, url, str(n), str(committed)], check=True, env=env,
                   timeout=60)


def test_replay_after_a_crash_imports_everything_exactly_once(db_url: str) -> None:
    _crash(db_url, 200)
    ledger = Ledger(db_url)
    assert ledger.start() == 200
    # The importer may have committed a few before the kill; replay inserts the rest, once.
    stats = ledger.last_replay
    assert stats.records == 200 and stats.segments == 1 and 0 < stats.inserted <= 200
    assert [r.id for r in ledger.rows(*EVER)] == [full_record(i).id for i in range(200)]
    assert list(ledger.rows(*EVER)) == [full_record(i) for i in range(200)]
    assert list(ledger.journal_dir.glob("*.jsonl")) != []  # only this ledger's own, open segment
    ledger.close()

    again = Ledger(db_url)
    assert again.start() == 0
    assert again.count(*EVER) == 200
    again.close()


def test_replay_skips_what_was_already_committed(db_url: str) -> None:
    _crash(db_url, 100, committed=60)
    ledger = Ledger(db_url)
    assert ledger.start() == 100
    assert ledger.last_replay.inserted == 40
    assert ledger.count(*EVER) == 100
    ledger.close()


def test_a_torn_last_line_is_skipped_and_counted(db_url: str, tmp_path: Path) -> None:
    journal = tmp_path / "data" / "journal"
    journal.mkdir(parents=True)
    lines = [orjson.dumps(full_record(i).to_json_dict()) + b"\n" for i in range(3)]
    torn = orjson.dumps(full_record(3).to_json_dict())[:57]
    (journal / "segment-00000000000000000001-1-dead.jsonl").write_bytes(b"".join(lines) + torn)
    ledger = Ledger(db_url)
    assert ledger.start() == 3
    assert ledger.last_replay.skipped_lines == 1
    assert [r.id for r in ledger.rows(*EVER)] == [full_record(i).id for i in range(3)]
    assert not (journal / "segment-00000000000000000001-1-dead.jsonl").exists()
    ledger.close()


def test_a_garbled_middle_line_does_not_stop_the_rest(db_url: str, tmp_path: Path) -> None:
    journal = tmp_path / "data" / "journal"
    journal.mkdir(parents=True)
    good = [orjson.dumps(full_record(i).to_json_dict()) + b"\n" for i in range(2)]
    (journal / "segment-00000000000000000002-1-beef.jsonl").write_bytes(good[0] + b"{not json\n" + good[1])
    ledger = Ledger(db_url)
    assert ledger.start() == 2 and ledger.last_replay.skipped_lines == 1
    ledger.close()


def test_a_live_writers_segment_is_left_alone(db_url: str, ledgers: list[Ledger]) -> None:
    writer = Ledger(db_url, batch_size=10**9, flush_interval_s=3600)
    ledgers.append(writer)
    writer.start()
    for i in range(5):
        writer.append(full_record(i))
    other = Ledger(db_url)
    ledgers.append(other)
    assert other.start() == 0
    assert other.last_replay.busy == 1
    assert other.count(*EVER) == 0
    assert writer.flush()
    assert other.count(*EVER) == 5


def test_segments_rotate_and_imported_ones_are_deleted(db_url: str, ledgers: list[Ledger]) -> None:
    ledger = Ledger(db_url, segment_bytes=4096, batch_size=50)
    ledgers.append(ledger)
    ledger.start()
    seen: set[str] = set()
    for i in range(300):
        ledger.append(full_record(i))
        seen.update(p.name for p in ledger.journal_dir.iterdir())
    assert ledger.flush()
    assert len(seen) > 10  # about 3 records fit in 4 KiB
    assert wait_until(lambda: len(list(ledger.journal_dir.iterdir())) == 1)
    assert ledger.count(*EVER) == 300


def test_journal_lines_hold_no_text_beyond_the_record(db_url: str, ledgers: list[Ledger]) -> None:
    ledger = Ledger(db_url, batch_size=10**9, flush_interval_s=3600)
    ledgers.append(ledger)
    ledger.start()
    ledger.append(full_record(7))
    (segment,) = ledger.journal_dir.iterdir()
    line = segment.read_bytes()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert set(orjson.loads(line)) == set(full_record(7).to_json_dict())
    assert os.stat(segment).st_size == len(line)
