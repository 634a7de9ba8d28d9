"""The ledger's database: `open_store(url)` picks SQLite or PostgreSQL by the URL.

base.py holds what every store does, in SQL written once (SqlStore); sqlite.py and
postgres.py hold only what differs per dialect; rows.py turns records into rows by column
name and back. This package is the one place that knows both dialects: neither imports it.
"""

from __future__ import annotations

from pathlib import Path

from proxy.ledger.store.base import LEDGER_ID, SqlStore, Store, Writer
from proxy.ledger.store.errors import (
    LedgerMissing,
    LedgerOutdated,
    LedgerReplaced,
    LedgerTooNew,
    RecordRefused,
    StoreUnavailable,
)
from proxy.ledger.store.minutes import MinuteLoad
from proxy.ledger.store.rows import COLUMNS, HourlyRow, SpeedRow
from proxy.ledger.store.sqlite import SqliteStore

__all__ = ["COLUMNS", "LEDGER_ID", "HourlyRow", "LedgerMissing", "LedgerOutdated", "LedgerReplaced", "LedgerTooNew",
           "MinuteLoad", "RecordRefused", "SpeedRow", "SqlStore", "SqliteStore", "Store", "StoreUnavailable", "Writer",
           "is_postgresql", "open_store", "sqlite_path"]


def open_store(url: str, busy_timeout_s: float = 5.0, *, read_only: bool = False) -> SqlStore:
    """`sqlite:///rel.db`, `sqlite:////abs.db` or a plain path; or `postgresql://user@host/db`.

    Nothing connects here: a database that is down surfaces later, as StoreUnavailable.
    `read_only` (report, export) is the exception: it opens and checks the ledger at once
    and never creates, migrates or writes anything (LedgerMissing, LedgerTooNew,
    LedgerOutdated); a SQLite snapshot in a read-only directory can be read.
    """
    store: SqlStore
    if is_postgresql(url):
        # Here, not at the top: psycopg takes a tenth of a second to import, and a SQLite ledger never needs it.
        from proxy.ledger.store.postgres import PostgresStore

        store = PostgresStore(url, busy_timeout_s, read_only=read_only)
    else:
        store = SqliteStore(sqlite_path(url), busy_timeout_s, read_only=read_only, url=url)
    if read_only:
        store.migrate()
    return store


def is_postgresql(url: str) -> bool:
    scheme, sep, _ = url.partition("://")
    scheme = scheme.lower()
    return bool(sep) and (scheme in ("postgresql", "postgres") or scheme.startswith("postgresql+"))


def sqlite_path(url: str) -> Path:
    scheme, sep, rest = url.partition("://")
    if not sep:
        if not url.strip():
            raise ValueError("ledger URL is empty")
        return Path(url)
    scheme = scheme.lower()
    if scheme != "sqlite":
        raise ValueError(f"unsupported ledger URL scheme {scheme!r} "
                         "(use sqlite:///path/to/llmmeter.db or postgresql://user@host/db)")
    if not rest.startswith("/"):
        raise ValueError(f"ledger URL {url!r} needs three slashes: sqlite:///relative.db or sqlite:////abs.db")
    path = rest[1:].split("?", 1)[0]
    if not path or path == ":memory:":
        raise ValueError(f"ledger URL {url!r} must name a database file")
    return Path(path)
