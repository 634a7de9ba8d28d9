"""`report --out` and `export --out`: never the ledger, its WAL/SHM or journal; written
whole (temporary file, then rename) and 0600; a bad path is a clean error, exit 2."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from proxy.errors import OutputError
from proxy.export import check_output
from proxy.ledger import Ledger
from tests.ledger.helpers import full_record


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "proxy", *args], capture_output=True, text=True,
                          timeout=60, cwd=cwd)


@pytest.fixture
def ledger_dir(tmp_path: Path) -> Path:
    """A SQLite ledger with records, in WAL mode, at tmp_path/data/l.db (journal in data/journal)."""
    ledger = Ledger(f"sqlite:///{tmp_path / 'data' / 'l.db'}")
    ledger.start()
    ledger.append_many([full_record(i) for i in range(20)])
    assert ledger.flush()
    ledger.close()
    (tmp_path / "data" / "journal").mkdir(exist_ok=True)
    return tmp_path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


EXPORT = ("export", "--from", "2026-11-01", "--to", "2026-12-01", "--db", "sqlite:///data/l.db")
REPORT = ("report", "--month", "2026-11", "--db", "sqlite:///data/l.db")


@pytest.mark.parametrize("command", [EXPORT, REPORT], ids=["export", "report"])
@pytest.mark.parametrize("out", ["data/l.db", "data/l.db-wal", "data/l.db-shm", "data/../data/l.db",
                                 "data/journal/x.csv", "data/journal", "hard.db", "sym.db"])
def test_an_out_that_is_the_ledger_is_refused_and_the_ledger_kept(ledger_dir: Path, command: tuple[str, ...],
                                                                   out: str) -> None:
    db = ledger_dir / "data" / "l.db"
    os.link(db, ledger_dir / "hard.db")
    (ledger_dir / "sym.db").symlink_to(db)
    before = digest(db)
    r = run(*command, "--out", out, cwd=ledger_dir)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"llmmeter: --out {out}: ") and "Traceback" not in r.stderr
    assert "ledger" in r.stderr or "directory" in r.stderr
    assert digest(db) == before and db.stat().st_size > 0
    assert not list((ledger_dir / "data" / "journal").glob("*.csv"))
    exported = run(*EXPORT, cwd=ledger_dir)
    assert exported.returncode == 0 and len(exported.stdout.splitlines()) == 21, exported.stderr


@pytest.mark.parametrize("command", [EXPORT, REPORT], ids=["export", "report"])
@pytest.mark.parametrize(("out", "words"), [("/nonexistent/x.csv", "the directory /nonexistent does not exist"),
                                            (".", "is a directory"), ("data", "is a directory")])
def test_a_missing_directory_or_a_directory_is_a_clean_error(ledger_dir: Path, command: tuple[str, ...],
                                                             out: str, words: str) -> None:
    r = run(*command, "--out", out, cwd=ledger_dir)
    assert r.returncode == 2 and f"--out {out}: " in r.stderr and words in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("command", [EXPORT, REPORT], ids=["export", "report"])
def test_outputs_are_whole_private_and_replace_the_old_file(ledger_dir: Path, command: tuple[str, ...]) -> None:
    out = ledger_dir / "out.txt"
    out.write_text("an older output\n")
    os.chmod(out, 0o644)
    r = run(*command, "--out", "out.txt", cwd=ledger_dir)
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert "older" not in out.read_text() and out.read_text() == run(*command, cwd=ledger_dir).stdout
    assert sorted(p.name for p in ledger_dir.iterdir()) == ["data", "out.txt"]  # no temporary file left


def test_a_symlinked_out_updates_its_target(ledger_dir: Path) -> None:
    (ledger_dir / "reports").mkdir()
    (ledger_dir / "latest.md").symlink_to(ledger_dir / "reports" / "nov.md")
    r = run(*REPORT, "--out", "latest.md", cwd=ledger_dir)
    assert r.returncode == 0, r.stderr
    assert (ledger_dir / "latest.md").is_symlink() and (ledger_dir / "reports" / "nov.md").read_text()


def test_a_failed_write_leaves_the_old_file_and_no_half_file(tmp_path: Path) -> None:
    out = tmp_path / "x.csv"
    out.write_text("whole\n")
    target = check_output(out, [], tmp_path / "journal")
    with pytest.raises(RuntimeError), target.open() as f:
        f.write("half a row")
        f.flush()
        raise RuntimeError("the ledger read failed midway")
    assert out.read_text() == "whole\n"
    assert [p.name for p in tmp_path.iterdir()] == ["x.csv"]
    with target.open() as f:
        f.write("new\n")
    assert out.read_text() == "new\n" and stat.S_IMODE(out.stat().st_mode) == 0o600


def test_an_unwritable_device_is_an_output_error_not_a_traceback(tmp_path: Path) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    target = check_output(Path("/dev/full"), [], tmp_path / "journal")
    with pytest.raises(OutputError, match=r"^--out /dev/full: cannot write: No space left"), target.open() as f:
        f.write("x" * 100_000)


@pytest.mark.parametrize(("make", "refused"), [
    (lambda d: d / "l.db", True),
    (lambda d: d / "l.db-wal", True),
    (lambda d: d / "journal" / "seg-000001.jsonl", True),
    (lambda d: d / "journal" / "deep" / "x", True),
    (lambda d: d / "report.md", False),
    (lambda d: d / "l.db.csv", False),
])
def test_check_output_by_path(tmp_path: Path, make: Callable[[Path], Path], refused: bool) -> None:
    (tmp_path / "journal" / "deep").mkdir(parents=True)
    ledger_files = [tmp_path / "l.db", tmp_path / "l.db-wal", tmp_path / "l.db-shm"]
    if refused:
        with pytest.raises(OutputError):
            check_output(make(tmp_path), ledger_files, tmp_path / "journal")
    else:
        assert check_output(make(tmp_path), ledger_files, tmp_path / "journal").path == make(tmp_path)


def test_check_output_by_inode_catches_hard_links_into_the_journal(tmp_path: Path) -> None:
    (tmp_path / "journal").mkdir()
    segment = tmp_path / "journal" / "seg.jsonl"
    segment.write_text("{}\n")
    os.link(segment, tmp_path / "innocent.csv")
    with pytest.raises(OutputError, match="journal"):
        check_output(tmp_path / "innocent.csv", [], tmp_path / "journal")


@pytest.mark.parametrize(("args", "words"), [
    (("report", "--month", "9999-12"), "--month '9999-12' is out of range"),
    (("report", "--month", "0001-01", "--tz", "Pacific/Kiritimati"), "--month '0001-01' is out of range"),
    (("export", "--from", "0001-01-01", "--to", "2026-01-01"), "'0001-01-01' is out of range"),
    (("export", "--from", "2026-01-01", "--to", "9999-12-31T23:59:59-12:00"), "is out of range"),
])
def test_times_at_the_edge_of_the_calendar_are_clean_errors(tmp_path: Path, args: tuple[str, ...],
                                                            words: str) -> None:
    r = run(*args, "--db", f"sqlite:///{tmp_path / 'l.db'}", cwd=tmp_path)
    assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, r.stderr
