"""The per-minute spreading SQL (migration 013) is written once per dialect, in
proxy/ledger/store/minutes.py, and the migrations hold copies of it, because a released
migration's text never changes: PostgreSQL's trigger and its backfill are postgres_minutes()
over the transition table and over `requests`, SQLite's backfill is the writer's
SQLITE_ADD_MINUTES without its batch condition. A change to the spreading changes
minutes.py and adds a migration that redefines what it replaces; these tests read the newest
migration that defines each part, so a copy that drifts from minutes.py fails here."""

from __future__ import annotations

from pathlib import Path

from proxy.ledger.store.minutes import SQLITE_ADD_MINUTES, postgres_minutes

MIGRATIONS = Path(__file__).resolve().parents[2] / "proxy" / "ledger" / "migrations"


def words(sql: str) -> str:
    return " ".join(sql.split())


def newest(pattern: str, needle: str) -> str:
    """The text of the newest migration matching `pattern` that contains `needle`."""
    found = [p for p in sorted(MIGRATIONS.glob(pattern)) if needle in p.read_text()]
    assert found, (pattern, needle)
    return words(found[-1].read_text())


def test_postgresql_trigger_is_postgres_minutes_over_the_added_rows() -> None:
    trigger = newest("*.postgresql.sql", "FUNCTION requests_minute_load()")
    assert words(postgres_minutes("added")) + " ORDER BY 1, 2 ON CONFLICT (minute, tenant)" in trigger


def test_postgresql_backfill_is_postgres_minutes_over_requests() -> None:
    backfill = newest("*.postgresql.sql", "INSERT INTO minute_load (minute")
    assert words(postgres_minutes("requests")) + ";" in backfill


def test_sqlite_backfill_is_the_writer_s_statement_over_every_row() -> None:
    backfill = newest("*.sqlite.sql", "INSERT INTO minute_load (minute")
    batch = words(SQLITE_ADD_MINUTES)
    assert batch.count("rowid > ? AND ") == 1
    assert batch.replace("rowid > ? AND ", "") + ";" in backfill
