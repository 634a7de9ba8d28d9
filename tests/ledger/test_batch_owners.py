"""A batch's owner is the tenant that created it (migration 011): a viewer is never one, and a
ledger upgraded from 010, which kept the first viewer beside each file, keeps no such owner."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from proxy.ledger.migrations import load
from proxy.ledger.store import open_store
from proxy.ledger.store.batch_files import BatchFile
from proxy.ledger.store.sqlite import SqliteStore


def test_an_upgraded_ledger_forgets_who_saw_a_file_first(tmp_path: Path) -> None:
    path = tmp_path / "at-010.db"
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                "applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)")
    for m in load("sqlite")[:10]:
        con.executescript(m.sql)
        con.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", (m.version, m.name))
    # 010 kept the tenant whose listing showed the batch first: a viewer, not the owner.
    con.execute("INSERT INTO batch_files (upstream, file_id, tenant, batch_id, seen_at) "
                "VALUES ('openai', 'file-out', 'viewer', 'batch_1', 1)")
    con.close()

    store = SqliteStore(path)
    assert store.migrate() == len(load("sqlite")) - 10
    assert store.batch_file("openai", "file-out") == BatchFile("batch_1", None)  # still batch output, no owner
    store.note_batch_owner("openai", "batch_1", "creator", 2)
    assert store.batch_file("openai", "file-out") == BatchFile("batch_1", "creator")


def test_the_first_creation_keeps_the_batch(tmp_path: Path, ledger_db: str | None) -> None:
    store = open_store(ledger_db or f"sqlite:///{tmp_path / 'ledger.db'}")
    store.migrate()
    assert store.batch_owner("openai", "batch_1") is None
    store.note_batch_owner("openai", "batch_1", "team-a", 1)
    # A later answer naming the same id (a replay, an idempotent retry by another key) changes nothing.
    store.note_batch_owner("openai", "batch_1", "team-b", 2)
    assert store.batch_owner("openai", "batch_1") == "team-a"
    assert store.batch_owner("anthropic", "batch_1") is None  # per upstream
    # Whoever's listing names its files, they are the creator's.
    store.note_batch_files("openai", "batch_1", ["file-out", "file-err"], 3)
    assert store.batch_file("openai", "file-err") == BatchFile("batch_1", "team-a")
    assert store.batch_file("openai", "file-other") is None
