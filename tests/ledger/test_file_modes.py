"""The ledger holds end_user: its SQLite file, WAL and SHM, journal segments and dead letters are
created 0640 (owner read-write, group read) whatever the umask lets through, and narrower when
the umask says so."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.ledger import Ledger
from tests.ledger.helpers import full_record


@pytest.fixture
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize(("umask", "file_mode", "dir_mode"), [(0o022, 0o640, 0o750), (0o002, 0o640, 0o750),
                                                              (0o077, 0o600, 0o700)], indirect=["umask"])
def test_ledger_files_are_created_private(umask: int, file_mode: int, dir_mode: int, tmp_path: Path) -> None:
    db = tmp_path / "data" / "ledger.db"
    ledger = Ledger(f"sqlite:///{db}")
    ledger.start()
    try:
        ledger.append_many([full_record(1), full_record(2, tenant=None)])  # the second is refused: a dead letter
        assert ledger.flush() and ledger.rejected == 1
        files = [db, db.with_name("ledger.db-wal"), db.with_name("ledger.db-shm"),
                 *ledger.journal_dir.glob("*.jsonl"), *ledger.dead_letter_dir.glob("*.jsonl")]
        assert len(files) == 5
        assert {str(f.relative_to(tmp_path)): oct(mode(f)) for f in files} == {
            str(f.relative_to(tmp_path)): oct(file_mode) for f in files}
        assert oct(mode(db.parent)) == oct(dir_mode) and oct(mode(ledger.journal_dir)) == oct(dir_mode)
        assert oct(mode(ledger.dead_letter_dir)) == oct(dir_mode)
    finally:
        ledger.close()
