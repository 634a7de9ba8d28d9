"""`llmmeter migrate` through the real command line: a ledger older than the code is read by no
one until it is migrated (report and export say so and change nothing); migrate brings it up
to date and imports what the ledger's journal still holds."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg

from proxy.ledger import Ledger
from proxy.ledger.migrations import load
from proxy.ledger.store import is_postgresql, sqlite_path
from tests.ledger.helpers import EVER, full_record
from tests.ledger.test_journal_binding import left_behind

BEFORE_IDS = 5  # the last migration an llmmeter without ledger ids shipped
MIGRATIONS_TABLE = ("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                    "applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)")


def older_ledger(url: str) -> None:
    """A ledger as the llmmeter before migration 006 left it."""
    if is_postgresql(url):
        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute(MIGRATIONS_TABLE.encode())
            for m in load("postgresql")[:BEFORE_IDS]:
                pg.execute(m.sql.encode())
                pg.execute(b"INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (m.version, m.name))
        return
    path = sqlite_path(url)
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute(MIGRATIONS_TABLE)
        for m in load("sqlite")[:BEFORE_IDS]:
            con.executescript(m.sql)
            con.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", (m.version, m.name))
    finally:
        con.close()


def versions(url: str) -> list[int]:
    sql = "SELECT version FROM schema_migrations ORDER BY version"
    if is_postgresql(url):
        with psycopg.connect(url) as pg:
            return [int(v) for (v,) in pg.execute(sql.encode()).fetchall()]
    con = sqlite3.connect(sqlite_path(url))
    try:
        return [int(v) for (v,) in con.execute(sql)]
    finally:
        con.close()


def llmmeter(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMMETER_")}
    return subprocess.run([sys.executable, "-m", "proxy", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=60)


def test_report_and_export_on_an_older_ledger_say_run_llmmeter_migrate_and_migrate_makes_them_work(
        db_url: str, tmp_path: Path) -> None:
    older_ledger(db_url)
    reads = (("report", "--month", "2026-11"), ("export", "--from", "2026-11-01", "--to", "2026-12-01"))
    for command in reads:
        done = llmmeter(tmp_path, *command, "--db", db_url)
        assert done.returncode != 0 and done.stdout == ""
        lacking = ", ".join(f"{m.version:03d}" for m in load()[BEFORE_IDS:])  # 006 onwards
        assert f"lacks migration(s) {lacking}); run `llmmeter migrate` to bring it up to date" in done.stderr
        assert "Traceback" not in done.stderr
    assert versions(db_url) == list(range(1, BEFORE_IDS + 1))  # a read never migrates
    done = llmmeter(tmp_path, "migrate", "--db", db_url)
    assert done.returncode == 0, done.stderr
    assert f"{len(load()) - BEFORE_IDS} migration(s) applied, schema at version {load()[-1].version:03d}" in done.stdout
    assert versions(db_url) == [m.version for m in load()]
    for command in reads:
        done = llmmeter(tmp_path, *command, "--db", db_url)
        assert done.returncode == 0, done.stderr
    assert llmmeter(tmp_path, "export", "--from", "2026-11-01", "--to", "2026-12-01", "--db", db_url).stdout \
        .startswith("id,start,tenant,")
    again = llmmeter(tmp_path, "migrate", "--db", db_url)
    assert again.returncode == 0 and "0 migration(s) applied" in again.stdout


def test_migrate_imports_what_the_ledgers_journal_still_holds(db_url: str, tmp_path: Path) -> None:
    ledger = Ledger(db_url, replica="gone-1")
    ledger.start()
    ledger.close()
    left_behind(ledger.journal_dir, ledger.ledger_id, [full_record(i) for i in range(3)])
    done = llmmeter(tmp_path, "migrate", "--db", db_url)
    assert done.returncode == 0, done.stderr
    assert "journal: 3 leftover record(s) from 1 segment(s), 3 new" in done.stdout
    assert Ledger(db_url, read_only=True).count(*EVER) == 3
