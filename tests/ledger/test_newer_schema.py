"""A ledger a newer llmmeter has migrated is refused, not written: this build would skip
what the unknown migration keeps (a rollup, a trigger's job), and the journal it would
replay belongs to the newer version. Nothing is lost: the journal stays for that version."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import orjson
import psycopg
import pytest

from proxy.ledger import Ledger
from proxy.ledger.migrations import load
from proxy.ledger.store import LedgerTooNew, open_store, sqlite_path
from tests.ledger.helpers import EVER, full_record
from tests.serve import free_port

ROOT = Path(__file__).resolve().parents[2]
NEXT = load("sqlite")[-1].version + 1  # the version a newer llmmeter would have added
SHIPPED = [m.version for m in load("sqlite")]


def execute(url: str, sql: str) -> None:
    if url.startswith("sqlite:"):
        con = sqlite3.connect(sqlite_path(url), isolation_level=None)
        try:
            con.execute(sql)
        finally:
            con.close()
    else:
        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute(sql.encode())


def versions(url: str) -> list[int]:
    sql = "SELECT version FROM schema_migrations ORDER BY version"
    if url.startswith("sqlite:"):
        con = sqlite3.connect(sqlite_path(url))
        try:
            return [v for (v,) in con.execute(sql)]
        finally:
            con.close()
    with psycopg.connect(url) as pg:
        return [v for (v,) in pg.execute(sql.encode())]


def upgraded_by_a_newer_build(url: str) -> None:
    assert open_store(url).migrate() == len(SHIPPED)
    execute(url, f"INSERT INTO schema_migrations (version, name) VALUES ({NEXT}, 'from_the_future')")


def test_a_ledger_with_an_unknown_migration_is_refused_and_its_journal_kept(
        db_url: str, tmp_path: Path, ledgers: list[Ledger]) -> None:
    upgraded_by_a_newer_build(db_url)
    journal = tmp_path / "journal"
    journal.mkdir()
    rec = full_record(7)
    segment = journal / "segment-00000000000000000001-1-abcd0123.jsonl"
    segment.write_bytes(orjson.dumps(rec, option=orjson.OPT_APPEND_NEWLINE | orjson.OPT_UTC_Z))

    with pytest.raises(LedgerTooNew, match=f"schema migration\\(s\\) {NEXT:03d}, newer than this llmmeter knows"):
        Ledger(db_url, journal_dir=journal).start()
    assert versions(db_url) == [*SHIPPED, NEXT]  # nothing applied on top, nothing undone
    assert segment.exists()  # not replayed into a ledger this build cannot keep right

    # Once a build that knows the version runs (here: the row is taken away), the record lands.
    execute(db_url, f"DELETE FROM schema_migrations WHERE version = {NEXT}")
    ledger = Ledger(db_url, journal_dir=journal)
    ledgers.append(ledger)
    assert ledger.start() == 1
    assert list(ledger.rows(*EVER)) == [rec]
    assert not segment.exists()


def llmmeter(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMMETER_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "proxy", *args], capture_output=True, text=True, timeout=60,
                          cwd=cwd, env=env)


def test_the_commands_say_why_they_refuse(db_url: str, tmp_path: Path) -> None:
    upgraded_by_a_newer_build(db_url)
    export = llmmeter("export", "--db", db_url, "--from", "2026-01-01", "--to", "2026-02-01", cwd=tmp_path)
    assert export.returncode == 1
    assert "newer than this llmmeter knows" in export.stderr and "Traceback" not in export.stderr
    serve = llmmeter("serve", "--db", db_url, "--port", str(free_port()), "--upstream", "http://127.0.0.1:9/v1",
                     cwd=tmp_path)
    assert serve.returncode == 3  # uvicorn: the application failed to start
    assert f"schema migration(s) {NEXT:03d}, newer than this llmmeter knows" in serve.stderr
    assert versions(db_url) == [*SHIPPED, NEXT]
