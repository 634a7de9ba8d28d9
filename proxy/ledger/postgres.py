"""The PostgreSQL ledger: one database for several llmmeter replicas, same schema as SQLite.

Each importer thread owns one connection; every read opens its own and streams rows
through a server-side cursor. Any failure of the server or the connection surfaces as
StoreUnavailable, so the ledger keeps records in its journal and backlog and retries.
A record the database refuses for its content (a number beyond BIGINT, a constraint) is
RecordRefused instead: the ledger then sets that record aside (proxy/ledger/deadletter.py).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from proxy.ledger import migrations
from proxy.ledger.percentiles import input_side_percentiles
from proxy.ledger.record import Record
from proxy.ledger.store import (
    COLUMNS,
    HOUR_US,
    HOURLY_SQL,
    ROLLUP_SQL,
    TENANT_COST_SQL,
    LedgerOutdated,
    LedgerTooNew,
    RecordRefused,
    StoreUnavailable,
    from_micros,
    from_row,
    money_rows,
    tenant_costs,
    to_micros,
    to_row,
    whole_hours,
)
from proxy.settings import redact_url

_COLS = ", ".join(COLUMNS)
# A batch is copied into a per-connection staging table, then moved with one INSERT, so
# the rollup trigger (migration 002) runs once per batch and duplicates are skipped.
_STAGING = "llmmeter_staging"
_CREATE_STAGING = f"CREATE TEMP TABLE IF NOT EXISTS {_STAGING} (ord INTEGER NOT NULL, LIKE requests) " \
                  "ON COMMIT DELETE ROWS"
_COPY = f"COPY {_STAGING} (ord, {_COLS}) FROM STDIN"
# In id order, so two writers that insert some of the same ids (a replay beside live
# traffic) wait for each other in one order and never deadlock; of two rows with one id
# in a batch the first is kept, as in SQLite.
_MOVE = (f"INSERT INTO requests ({_COLS}) SELECT {_COLS} FROM {_STAGING} ORDER BY id COLLATE \"C\", ord "
         "ON CONFLICT (id) DO NOTHING")
# COLLATE "C": ids order by their bytes, as in SQLite, whatever the database's locale.
_SELECT = f'SELECT {_COLS} FROM requests WHERE {{where}} ORDER BY start, id COLLATE "C"'
_FETCH = 1024
# Migrations from several replicas starting at once take turns on this advisory lock
# (a constant: the bytes of "llmmeter").
_MIGRATE_LOCK = int.from_bytes(b"llmmeter", "big")
_MIGRATIONS_TABLE = ("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
                     "name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
# SPEC "Settings": the journal of a ledger that is not a file sits under the working directory.
DEFAULT_JOURNAL_DIR = Path("data/journal")


class PostgresStore:
    def __init__(self, url: str, busy_timeout_s: float = 5.0, *, read_only: bool = False) -> None:
        self.safe_url = redact(url)
        self.read_only = read_only
        scheme, _, rest = url.partition("://")
        # `postgresql+psycopg://` (SQLAlchemy's spelling) is the same URL to libpq.
        url = "postgresql://" + rest if scheme.lower().startswith("postgresql+") else url
        try:
            params = conninfo_to_dict(url)
        except psycopg.Error:
            # libpq's own message may quote the URL, password and all.
            raise ValueError(f"ledger URL {self.safe_url!r} is not a PostgreSQL URL libpq accepts") from None
        # Waiting on a lock longer than SQLite's busy timeout is an outage like SQLite's: retried.
        lock_ms = max(1, round(busy_timeout_s * 1000))
        options = f"{params.get('options') or ''} -c lock_timeout={lock_ms}"
        if read_only:  # the server itself refuses any write from a read-only command
            options += " -c default_transaction_read_only=on"
        params["options"] = options.strip()
        params.setdefault("connect_timeout", max(2, math.ceil(busy_timeout_s)))
        params.setdefault("application_name", "llmmeter")
        self._conninfo = make_conninfo("", **params)

    def _connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        try:
            return psycopg.connect(self._conninfo, autocommit=True)
        except psycopg.Error as e:
            raise StoreUnavailable(f"{self.safe_url}: {e}") from e

    def default_journal_dir(self) -> Path:
        return DEFAULT_JOURNAL_DIR.absolute()

    def migrate(self) -> int:
        if self.read_only:
            self._check_schema()
            return 0
        con = self._connect()
        try:
            with con.transaction():
                con.execute("SET LOCAL lock_timeout = 0")  # a migration elsewhere may take a while: wait for it
                con.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATE_LOCK,))
                con.execute(_MIGRATIONS_TABLE)
                applied = {v for (v,) in con.execute("SELECT version FROM schema_migrations")}
                shipped = migrations.load("postgresql")
                if newer := migrations.unknown(applied, shipped):
                    raise LedgerTooNew(self.safe_url, newer)  # leaving the block rolls back
                ran = 0
                for m in shipped:
                    if m.version in applied:
                        continue
                    con.execute(m.sql.encode())  # no parameters: the whole file goes as one simple query
                    con.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (m.version, m.name))
                    ran += 1
            return ran
        except psycopg.Error as e:
            raise StoreUnavailable(f"{self.safe_url}: migration failed: {e}") from e
        finally:
            con.close()

    def _check_schema(self) -> None:
        """A read-only store's migrate(): the database has exactly the known migrations."""
        applied = {int(v) for (v,) in self._read("SELECT version FROM schema_migrations", ())}
        shipped = migrations.load("postgresql")
        if newer := migrations.unknown(applied, shipped):
            raise LedgerTooNew(self.safe_url, newer)
        if missing := [m.version for m in shipped if m.version not in applied]:
            raise LedgerOutdated(self.safe_url, missing)

    def writer(self) -> PostgresWriter:
        if self.read_only:
            raise StoreUnavailable(f"{self.safe_url}: opened read-only")
        con = self._connect()
        try:
            con.execute(_CREATE_STAGING)
        except psycopg.Error as e:
            con.close()
            raise StoreUnavailable(f"{self.safe_url}: {e}") from e
        return PostgresWriter(con, self.safe_url)

    def query(self, start_from: datetime, start_to: datetime, tenant: str | None) -> Iterator[Record]:
        where, params = _range(start_from, start_to, tenant)
        con = self._connect()
        try:
            # A named cursor lives on the server: rows come _FETCH at a time, never the whole range.
            with con.transaction(), con.cursor(name="llmmeter_rows") as cur:
                cur.itersize = _FETCH
                cur.execute(_SELECT.format(where=where), params)
                for row in cur:
                    yield from_row(row)
        except psycopg.Error as e:
            raise StoreUnavailable(f"{self.safe_url}: {e}") from e
        finally:
            con.close()

    def count(self, start_from: datetime, start_to: datetime, tenant: str | None) -> int:
        where, params = _range(start_from, start_to, tenant)
        [(n,)] = self._read(f"SELECT COUNT(*) FROM requests WHERE {where}", params)
        return int(n)

    def cost_by_tenant(self, start_from: datetime, start_to: datetime) -> dict[str, int]:
        """As SqliteStore's: the rollup for whole UTC hours, the requests for the rest, added up in
        Python; tenants that spent nothing are left out."""
        lo, hi = to_micros(start_from), to_micros(start_to)
        first, last = whole_hours(lo, hi)
        costs = tenant_costs(self._read(TENANT_COST_SQL.format(where="hour >= %s AND hour < %s"),
                                        (first // HOUR_US, last // HOUR_US)))
        for row in self._summed(lo, first, None) + self._summed(last, hi, None):
            costs[row[5]] = costs.get(row[5], 0) + row[17]
        return {tenant: units for tenant, units in costs.items() if units}

    def hourly(self, start_from: datetime, start_to: datetime, tenant: str | None) -> list[tuple[Any, ...]]:
        """As SqliteStore.hourly: the range's whole UTC hours from the rollup, its partial first
        and last hours (half-hour zones) summed from the requests themselves."""
        lo, hi = to_micros(start_from), to_micros(start_to)
        first, last = whole_hours(lo, hi)
        where = "hour >= %s AND hour < %s" + (" AND tenant = %s" if tenant is not None else "")
        rows = money_rows(self._read(ROLLUP_SQL.format(where=where),
                                     (first // HOUR_US, last // HOUR_US, *((tenant,) if tenant is not None else ()))))
        return self._summed(lo, first, tenant) + rows + self._summed(last, hi, tenant)

    def _summed(self, lo: int, hi: int, tenant: str | None) -> list[tuple[Any, ...]]:
        """HOURLY_SQL over the requests in [lo, hi) microseconds."""
        if lo >= hi:
            return []
        where, params = _range(from_micros(lo), from_micros(hi), tenant)
        # SUM over BIGINT is NUMERIC here; money_rows makes the rows integers, as SQLite gives them.
        return money_rows(self._read(HOURLY_SQL.format(where=where), params))

    def input_side_percentiles(self, start_from: datetime, start_to: datetime, tenant: str | None,
                               percents: Sequence[int]) -> dict[str, list[int]]:
        """As SqliteStore's: exact nearest rank from the size histogram (proxy/ledger/percentiles.py)."""
        return input_side_percentiles(self._read, _range, "%s", start_from, start_to, tenant, percents)

    def _read(self, sql: str, params: tuple[object, ...]) -> list[tuple[Any, ...]]:
        """One read on its own connection; every failure surfaces as StoreUnavailable."""
        con = self._connect()
        try:
            return con.execute(sql.encode(), params).fetchall()
        except psycopg.Error as e:
            raise StoreUnavailable(f"{self.safe_url}: {e}") from e
        finally:
            con.close()


class PostgresWriter:
    """The importer thread's connection, with its own staging table."""

    def __init__(self, con: psycopg.Connection[tuple[Any, ...]], safe_url: str) -> None:
        self.con, self.safe_url = con, safe_url

    def insert_many(self, records: Sequence[Record]) -> int:
        rows = [_text_safe(to_row(r)) for r in records]  # RecordRefused before any transaction begins
        try:
            with self.con.transaction(), self.con.cursor() as cur:
                with cur.copy(_COPY) as copy:
                    for i, row in enumerate(rows):
                        copy.write_row((i, *row))
                cur.execute(_MOVE)
                return cur.rowcount
        except Exception as e:
            if self.con.closed or self.con.info.transaction_status != pq.TransactionStatus.IDLE:
                raise StoreUnavailable(f"{self.safe_url}: {e}") from e  # nothing to go on with: a new connection
            if isinstance(e, _REFUSALS):
                raise RecordRefused(f"{self.safe_url}: the database refused a ledger record: {e}") from e
            raise StoreUnavailable(f"{self.safe_url}: {e}") from e

    def close(self) -> None:
        with contextlib.suppress(psycopg.Error):  # a broken connection has nothing left to save
            self.con.close()


# What a record's content can make PostgreSQL (or the COPY that sends it) refuse: a value
# out of range, a constraint, a string it cannot encode; the rest is the server's trouble.
_REFUSALS = (psycopg.DataError, psycopg.IntegrityError, psycopg.errors.ProgramLimitExceeded,
             OverflowError, TypeError, ValueError)


def redact(url: str) -> str:
    """The URL without its password or query (which may hold one), for messages and logs."""
    return redact_url(url)  # one redaction for every spelling: unencoded '/', '@', DSNs


def _text_safe(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """PostgreSQL text cannot hold NUL, which a client can put in a model name: store U+FFFD
    rather than lose the record."""
    return tuple(v.replace("\x00", "\ufffd") if isinstance(v, str) and "\x00" in v else v for v in row)


def _range(start_from: datetime, start_to: datetime, tenant: str | None) -> tuple[str, tuple[object, ...]]:
    if tenant is None:
        return "start >= %s AND start < %s", (to_micros(start_from), to_micros(start_to))
    return "tenant = %s AND start >= %s AND start < %s", (tenant, to_micros(start_from), to_micros(start_to))
