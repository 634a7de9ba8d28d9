"""Read-only ledgers for report and export: a missing one is an error naming its URL, never a new
empty file; a snapshot (a 0444 file in a read-only directory) is read without a write anywhere."""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from proxy.ledger import Ledger
from proxy.ledger.migrations import load
from proxy.ledger.store import LedgerMissing, LedgerOutdated, StoreUnavailable, open_store
from proxy.ledger.store.postgres import PostgresStore
from tests.ledger.helpers import EVER, full_record

NOBODY = 65534
MONTH = (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))


def what_a_report_reads(url: str) -> dict[str, object]:
    store = open_store(url, read_only=True)
    return {"rows": [r.id for r in store.query(*EVER, None)], "count": store.count(*EVER, None),
            "hourly": sorted(store.hourly(*MONTH, None)), "cost": store.cost_by_tenant(*MONTH),
            "percentiles": store.input_side_percentiles(*MONTH, None, (50, 95))}


def test_a_missing_ledger_is_an_error_naming_the_url_and_nothing_is_made(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'data' / 'ledgr.db'}"  # a typo of ledger.db
    with pytest.raises(LedgerMissing, match=f"^{url}: no ledger at"):
        open_store(url, read_only=True)
    with pytest.raises(LedgerMissing):
        Ledger(url, read_only=True)
    assert not (tmp_path / "data").exists()


@pytest.fixture
def snapshot(tmp_path: Path) -> Iterator[Path]:
    """A ledger closed cleanly and copied into a directory nobody may write: ledger.db, 0444."""
    live = tmp_path / "live" / "ledger.db"
    ledger = Ledger(f"sqlite:///{live}")
    ledger.start()
    ledger.append_many([full_record(i, tenant=("a", "b")[i % 2]) for i in range(40)])
    assert ledger.flush()
    ledger.close()
    root = Path(tempfile.mkdtemp(prefix="llmmeter-snapshot-"))  # outside root's 0700 pytest directory
    os.chmod(root, 0o755)
    snap = root / "snap"
    snap.mkdir()
    shutil.copy(live, snap / "ledger.db")
    os.chmod(snap / "ledger.db", 0o444)
    os.chmod(snap, 0o555)
    try:
        yield snap / "ledger.db"
    finally:
        os.chmod(snap, 0o755)
        shutil.rmtree(root)


def test_a_read_only_snapshot_is_read_and_nothing_is_written(snapshot: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{snapshot}"
    before = snapshot.read_bytes()
    got = what_a_report_reads(url)
    assert got["count"] == 40 and got["rows"] == [full_record(i).id for i in range(40)]
    assert got["cost"] == {t: sum(full_record(i).cost_units or 0 for i in range(40) if "ab"[i % 2] == t)
                           for t in "ab"}
    assert os.listdir(snapshot.parent) == ["ledger.db"] and snapshot.read_bytes() == before
    if os.geteuid() != 0:
        return
    # Root writes through any mode: the same reads as an ordinary user, for whom it is truly read-only.
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        os.close(r)
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            out = orjson.dumps(what_a_report_reads(url), default=str)
        except BaseException as e:
            out = orjson.dumps({"error": repr(e)})
        os.write(w, out)
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as pipe:
        child = orjson.loads(pipe.read())
    os.waitpid(pid, 0)
    assert child == orjson.loads(orjson.dumps(got, default=str))
    assert os.listdir(snapshot.parent) == ["ledger.db"] and snapshot.read_bytes() == before


def test_a_read_only_store_never_writes(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    ledger = Ledger(f"sqlite:///{db}")
    ledger.start()
    ledger.append(full_record(1))
    assert ledger.flush()
    reader = Ledger(f"sqlite:///{db}", read_only=True)  # beside a live writer
    assert reader.start() == 0 and reader.count(*EVER) == 1
    with pytest.raises(StoreUnavailable, match="read-only"):
        reader.store.writer()
    reader.close()
    ledger.close()
    # A cold ledger in a writable directory: read, and left exactly as it was, no -wal or -shm behind.
    before, files = db.read_bytes(), sorted(os.listdir(tmp_path))
    assert what_a_report_reads(f"sqlite:///{db}")["count"] == 1
    assert db.read_bytes() == before and sorted(os.listdir(tmp_path)) == files == ["journal", "ledger.db"]


def test_a_ledger_from_an_older_llmmeter_is_not_migrated_by_a_read(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                "applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)")
    for m in load("sqlite")[:4]:
        con.executescript(m.sql)
        con.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", (m.version, m.name))
    con.close()
    before = path.read_bytes()
    lacking = ", ".join(f"{m.version:03d}" for m in load("sqlite") if m.version >= 5)
    with pytest.raises(LedgerOutdated, match=rf"lacks migration\(s\) {lacking}\); run `llmmeter migrate`"):
        open_store(f"sqlite:///{path}", read_only=True)
    assert path.read_bytes() == before


def test_a_read_only_postgresql_ledger_refuses_writes_on_the_server(pg_url: str, tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable, match="schema_migrations"):  # an empty database is no ledger
        open_store(pg_url, read_only=True)
    ledger = Ledger(pg_url, journal_dir=tmp_path / "j")
    ledger.start()
    ledger.append(full_record(1))
    assert ledger.flush()
    ledger.close()
    reader = Ledger(pg_url, read_only=True)
    assert [r.id for r in reader.rows(*EVER)] == [full_record(1).id]
    with pytest.raises(StoreUnavailable, match="read-only"):
        reader.store.writer()
    store = reader.store
    assert isinstance(store, PostgresStore)
    with pytest.raises(StoreUnavailable, match="read-only transaction"):  # the server's own refusal
        store._read("DELETE FROM requests RETURNING id", ())
