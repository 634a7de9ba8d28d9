"""The SQLite ledger: WAL, one writer connection per importer thread, readers on their own."""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from proxy.ledger import migrations
from proxy.ledger.percentiles import input_side_percentiles
from proxy.ledger.store import (
    BUCKET_OF,
    COLUMNS,
    HOUR_US,
    HOURLY_SQL,
    METERED_SQL,
    ROLLUP_SQL,
    LedgerTooNew,
    StoreUnavailable,
    from_micros,
    from_row,
    to_micros,
    to_row,
    whole_hours,
)
from proxy.record import Record

_ROW = f"({', '.join('?' * len(COLUMNS))})"
# Batches go in as multi-row INSERTs of power-of-two sizes (a handful of cached statements).
# sqlite3 releases the GIL around each statement step, and a busy event loop keeps the
# importer waiting up to a switch interval to get it back: per-row steps starved it.
_CHUNKS = (256, 128, 64, 32, 16, 8, 4, 2, 1)  # 256 rows x 29 columns stays under SQLite's 32766 variables
_SELECT = f"SELECT {', '.join(COLUMNS)} FROM requests"
_FETCH = 1024
_DENSE = 4  # read a rowid run when at most this many rowids per row in range
# Migration 004: the batch's new rows are added to 002's rollup and 003's histogram here.
_ADD_TO_ROLLUP = "INSERT INTO hourly_rollup " + HOURLY_SQL.format(where="rowid > ?") + """
ON CONFLICT (hour, model, unpriced_model, tier, upstream, tenant, tag, workload, metered) DO UPDATE SET
    requests = requests + excluded.requests,
    input_tokens = input_tokens + excluded.input_tokens,
    cache_read_tokens = cache_read_tokens + excluded.cache_read_tokens,
    cache_write_tokens = cache_write_tokens + excluded.cache_write_tokens,
    output_tokens = output_tokens + excluded.output_tokens,
    reasoning_tokens = reasoning_tokens + excluded.reasoning_tokens,
    estimated = estimated + excluded.estimated,
    unpriced = unpriced + excluded.unpriced,
    cost_units = cost_units + excluded.cost_units"""
_ADD_TO_HISTOGRAM = f"""
INSERT INTO input_side_histogram
SELECT start / {HOUR_US}, tenant, ({BUCKET_OF}), COUNT(*) FROM requests
WHERE rowid > ? AND endpoint IN ({METERED_SQL})
GROUP BY 1, 2, 3
ON CONFLICT (hour, tenant, bucket) DO UPDATE SET requests = requests + excluded.requests"""


class SqliteStore:
    def __init__(self, path: Path, busy_timeout_s: float = 5.0) -> None:
        self.path = path
        self.busy_timeout_s = busy_timeout_s

    def _connect(self, readonly: bool = False) -> sqlite3.Connection:
        try:
            if not readonly:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: transactions are spelled out, never begun implicitly.
            con = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None)
            con.execute("PRAGMA synchronous=NORMAL")
            if readonly:
                con.execute("PRAGMA query_only=ON")
            return con
        except (sqlite3.Error, OSError) as e:
            raise StoreUnavailable(f"{self.path}: {e}") from e

    def default_journal_dir(self) -> Path:
        return self.path.parent / "journal"

    def migrate(self) -> int:
        con = self._connect()
        try:
            con.execute("PRAGMA journal_mode=WAL")
            # IMMEDIATE takes the write lock first, so two workers starting together apply each migration once.
            con.execute("BEGIN IMMEDIATE")
            con.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
                        "name TEXT NOT NULL, applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)")
            applied = {v for (v,) in con.execute("SELECT version FROM schema_migrations")}
            shipped = migrations.load()
            if newer := migrations.unknown(applied, shipped):
                con.execute("ROLLBACK")
                raise LedgerTooNew(str(self.path), newer)
            ran = 0
            for m in shipped:
                if m.version in applied:
                    continue
                for statement in _statements(m.sql):
                    con.execute(statement)
                con.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", (m.version, m.name))
                ran += 1
            con.execute("COMMIT")
            return ran
        except sqlite3.Error as e:
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise StoreUnavailable(f"{self.path}: migration failed: {e}") from e
        finally:
            con.close()

    def writer(self) -> SqliteWriter:
        return SqliteWriter(self._connect(), self.path)

    def query(self, start_from: datetime, start_to: datetime, tenant: str | None) -> Iterator[Record]:
        where, params = _range(start_from, start_to, tenant)
        con = self._connect(readonly=True)
        try:
            cur = con.execute(f"{_SELECT} WHERE {where} ORDER BY start, id", params)
            while batch := cur.fetchmany(_FETCH):
                for row in batch:
                    yield from_row(row)
        except sqlite3.Error as e:
            raise StoreUnavailable(f"{self.path}: {e}") from e
        finally:
            con.close()

    def count(self, start_from: datetime, start_to: datetime, tenant: str | None) -> int:
        where, params = _range(start_from, start_to, tenant)
        [(n,)] = self._read(f"SELECT COUNT(*) FROM requests WHERE {where}", params)
        return int(n)

    def cost_by_tenant(self, start_from: datetime, start_to: datetime) -> dict[str, int]:
        where, params = self._scan(start_from, start_to, None)
        rows = self._read(f"SELECT tenant, SUM(cost_units) FROM requests WHERE {where} "
                          "AND cost_units IS NOT NULL GROUP BY tenant", params)
        return {tenant: int(units) for tenant, units in rows}

    def hourly(self, start_from: datetime, start_to: datetime, tenant: str | None) -> list[tuple[Any, ...]]:
        """Sums per UTC hour and attribution key: the whole UTC hours of the range from the
        rollup; a range's partial first and last hours (zones with half-hour offsets, such
        as Asia/Kolkata) summed from the requests themselves."""
        lo, hi = to_micros(start_from), to_micros(start_to)
        first, last = whole_hours(lo, hi)
        where = "hour >= ? AND hour < ?" + (" AND tenant = ?" if tenant is not None else "")
        rows = self._read(ROLLUP_SQL.format(where=where),
                          (first // HOUR_US, last // HOUR_US, *((tenant,) if tenant is not None else ())))
        return self._summed(lo, first, tenant) + rows + self._summed(last, hi, tenant)

    def _summed(self, lo: int, hi: int, tenant: str | None) -> list[tuple[Any, ...]]:
        """HOURLY_SQL over the requests in [lo, hi) microseconds."""
        if lo >= hi:
            return []
        where, params = self._scan(from_micros(lo), from_micros(hi), tenant)
        return self._read(HOURLY_SQL.format(where=where), params)

    def input_side_percentiles(self, start_from: datetime, start_to: datetime, tenant: str | None,
                               percents: Sequence[int]) -> dict[str, list[int]]:
        """Exact nearest-rank percentiles of input-side tokens per metered request, per tenant
        (proxy/ledger/percentiles.py); long ranges are read as rowid runs (_scan)."""
        return input_side_percentiles(self._read, self._scan, "?", start_from, start_to, tenant, percents)

    def _scan(self, start_from: datetime, start_to: datetime, tenant: str | None) -> tuple[str, tuple[object, ...]]:
        """A WHERE clause for reading a long range row by row.

        Rows arrive, and so are numbered, in roughly time order, so a month is a run of
        rowids: reading that run straight through is several times faster than fetching
        each row through the start index. The start (and tenant) conditions stay, so the
        answer is exact whatever the order; when the run is much wider than the rows in
        range (records imported far out of order), the index is used as before.
        """
        where, params = _range(start_from, start_to, None)
        [(first, last, n)] = self._read(f"SELECT MIN(rowid), MAX(rowid), COUNT(*) FROM requests WHERE {where}",
                                        params)
        if not n or last - first + 1 > _DENSE * n:
            return _range(start_from, start_to, tenant)
        # The unary + keeps SQLite from choosing an index on these columns over the rowid run.
        where = "rowid BETWEEN ? AND ? AND +start >= ? AND +start < ?"
        params = (first, last, *params)
        if tenant is not None:
            where, params = where + " AND +tenant = ?", (*params, tenant)
        return where, params

    def _read(self, sql: str, params: tuple[object, ...]) -> list[tuple[Any, ...]]:
        """One read on its own connection; every failure surfaces as StoreUnavailable."""
        con = self._connect(readonly=True)
        try:
            return con.execute(sql, params).fetchall()
        except sqlite3.Error as e:
            raise StoreUnavailable(f"{self.path}: {e}") from e
        finally:
            con.close()


class SqliteWriter:
    """The importer thread's connection; every failure surfaces as StoreUnavailable."""

    def __init__(self, con: sqlite3.Connection, path: Path) -> None:
        self.con, self.path = con, path

    def insert_many(self, records: Sequence[Record]) -> int:
        rows = [to_row(r) for r in records]
        try:
            self.con.execute("BEGIN IMMEDIATE")
            # New rows get rowids above the largest so far; duplicates skipped get none.
            [(before,)] = self.con.execute("SELECT COALESCE(MAX(rowid), 0) FROM requests").fetchall()
            added, at = 0, 0
            for size in _CHUNKS:
                while len(rows) - at >= size:
                    params = [v for row in rows[at:at + size] for v in row]
                    added += self.con.execute(_insert(size), params).rowcount
                    at += size
            if added:
                self.con.execute(_ADD_TO_ROLLUP, (before,))
                self.con.execute(_ADD_TO_HISTOGRAM, (before,))
            self.con.execute("COMMIT")
            return added
        except sqlite3.Error as e:
            with contextlib.suppress(sqlite3.Error):  # the caller drops this connection anyway
                if self.con.in_transaction:
                    self.con.execute("ROLLBACK")
            raise StoreUnavailable(f"{self.path}: {e}") from e

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):  # a broken connection has nothing left to save
            self.con.close()


@functools.cache
def _insert(rows: int) -> str:
    return (f"INSERT INTO requests ({', '.join(COLUMNS)}) VALUES {', '.join([_ROW] * rows)} "
            "ON CONFLICT (id) DO NOTHING")


def _range(start_from: datetime, start_to: datetime, tenant: str | None) -> tuple[str, tuple[object, ...]]:
    if tenant is None:
        return "start >= ? AND start < ?", (to_micros(start_from), to_micros(start_to))
    return "tenant = ? AND start >= ? AND start < ?", (tenant, to_micros(start_from), to_micros(start_to))


def _statements(script: str) -> Iterator[str]:
    """Split a migration into statements the way SQLite itself sees their ends."""
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            if pending.strip():
                yield pending
            pending = ""
    if pending.strip() and not all(ln.strip().startswith("--") or not ln.strip() for ln in pending.splitlines()):
        raise ValueError("migration ends inside a statement")
