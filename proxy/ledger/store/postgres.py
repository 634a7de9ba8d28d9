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
from contextlib import AbstractContextManager
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import DictRow, dict_row

from proxy.ledger.record import Record
from proxy.ledger.store.base import Session, SqlStore
from proxy.ledger.store.budgets import settle_sql, settlements
from proxy.ledger.store.errors import RecordRefused, StoreUnavailable
from proxy.ledger.store.retention import count_sql, keep_batch_ids_sql, record_sql
from proxy.ledger.store.rows import COLUMNS, Row, from_micros, to_micros, to_row, values_of
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
# in a batch the first is kept, as in SQLite. The partitioned table's key is (id, start)
# (migration 012), so a record id already in the ledger under another start is skipped here:
# a batch result's id comes from its batch and line, and a second download of the file
# brings it again with a later start, which must bill nothing; so does one whose month was
# pruned since (its id kept in pruned_batch_ids, migration 017).
_MOVE = (f"INSERT INTO requests ({_COLS}) SELECT DISTINCT ON (id COLLATE \"C\") {_COLS} FROM {_STAGING} s "
         "WHERE NOT EXISTS (SELECT 1 FROM requests r WHERE r.id = s.id) "
         "AND NOT (s.endpoint = 'batch' AND EXISTS (SELECT 1 FROM pruned_batch_ids p WHERE p.id = s.id)) "
         "ORDER BY id COLLATE \"C\", ord "
         "ON CONFLICT (id, start) DO NOTHING")
# Two writers importing one batch line at once (two replicas, each serving a download) would
# each find its id absent: they take turns on a lock per such id, in id order, before moving.
_ID_LOCK = int.from_bytes(b"llid", "big")
_LOCK_DERIVED = (f"SELECT pg_advisory_xact_lock({_ID_LOCK}, hashtext(id)) FROM (SELECT DISTINCT id COLLATE \"C\" "
                 f"AS id FROM {_STAGING} WHERE endpoint = 'batch' ORDER BY 1) derived")
_FETCH = 1024
_START = COLUMNS.index("start")
# Migrations from several replicas starting at once take turns on this advisory lock
# (a constant: the bytes of "llmmeter").
_MIGRATE_LOCK = int.from_bytes(b"llmmeter", "big")
_BUDGET_LOCK = int.from_bytes(b"llmb", "big")  # with hashtext(budget name): one advisory lock per budget
# With the month as YYYYMM: one advisory lock per UTC month, held shared by reprice and
# reconcile while they use it, exclusively by a prune (retention). A session-level lock: it
# goes with the connection when a process dies.
_MONTH_LOCK = int.from_bytes(b"llmm", "big")
# How long a repricing waits for the imports in progress to end before it gives up.
_REPRICE_LOCK_WAIT_MS = 60_000
# SPEC "Settings": the journal of a ledger that is not a file sits under the working directory.
DEFAULT_JOURNAL_DIR = Path("data/journal")


class PostgresStore(SqlStore):
    dialect = "postgresql"
    mark = "%s"
    id_order = 'id COLLATE "C"'  # ids order by their bytes, as in SQLite, whatever the database's locale
    timestamp = "TIMESTAMPTZ NOT NULL DEFAULT now()"
    # clock_timestamp(), not now(): now() is the transaction's start, before the budget's lock was waited for.
    clock_sql = "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::bigint AS now_us"
    per_replica_journal = True  # replicas on several hosts, or several on one: never one folder for two

    def __init__(self, url: str, busy_timeout_s: float = 5.0, *, read_only: bool = False) -> None:
        super().__init__(redact(url), read_only=read_only)
        self.safe_url = self.shown
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

    def _connect(self) -> psycopg.Connection[DictRow]:
        try:
            return psycopg.connect(self._conninfo, autocommit=True, row_factory=dict_row)
        except psycopg.Error as e:
            raise StoreUnavailable(f"{self.safe_url}: {e}") from e

    def default_journal_dir(self) -> Path:
        return DEFAULT_JOURNAL_DIR.absolute()

    def _read(self, sql: str, params: tuple[object, ...]) -> list[Row]:
        con = self._connect()
        try:
            return list(con.execute(sql.encode(), params).fetchall())
        except psycopg.Error as e:
            raise StoreUnavailable(f"{self.safe_url}: {e}") from e
        finally:
            con.close()

    def _stream(self, sql: str, params: tuple[object, ...]) -> Iterator[Row]:
        con = self._connect()
        try:
            # A named cursor lives on the server: rows come _FETCH at a time, never the whole range.
            with con.transaction(), con.cursor(name="llmmeter_rows") as cur:
                cur.itersize = _FETCH
                cur.execute(sql.encode(), params)
                yield from cur
        except psycopg.Error as e:
            raise StoreUnavailable(f"{self.safe_url}: {e}") from e
        finally:
            con.close()

    def _migrating(self) -> AbstractContextManager[Session]:
        # lock_timeout 0: a migration elsewhere may take a while; wait for it.
        return self._locked(("SET LOCAL lock_timeout = 0", ()), ("SELECT pg_advisory_xact_lock(%s)", (_MIGRATE_LOCK,)),
                            failed="migration failed: ")

    def _write_locked(self) -> AbstractContextManager[Session]:
        """SHARE ROW EXCLUSIVE on `requests`, which every insert (ROW EXCLUSIVE) conflicts with: the
        importers of every replica wait (up to their lock timeout, then retry); reads go on."""
        return self._locked((f"SET LOCAL lock_timeout = {_REPRICE_LOCK_WAIT_MS}", ()),  # an import's is short
                            ("LOCK TABLE requests IN SHARE ROW EXCLUSIVE MODE", ()))

    def budget_locked(self, budget: str | None) -> AbstractContextManager[Session]:
        """A transaction holding the budget's advisory lock (none for None): grants of one budget
        take turns across every replica; imports never wait for it."""
        if budget is None:
            return self._locked()
        return self._locked(("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_BUDGET_LOCK, budget)))

    @contextlib.contextmanager
    def _locked(self, *setup: tuple[str, tuple[object, ...]], failed: str = "") -> Iterator[Session]:
        """A transaction on a fresh connection that first runs `setup` (its locks); an exception
        leaving the block rolls it back."""
        con = self._connect()
        try:
            with con.transaction():
                for sql, params in setup:
                    con.execute(sql.encode(), params)
                yield _Session(con)
        except psycopg.Error as e:
            raise StoreUnavailable(f"{self.safe_url}: {failed}{e}") from e
        finally:
            con.close()

    @contextlib.contextmanager
    def months_in_use(self, months: Sequence[str]) -> Iterator[None]:
        con = self._connect()
        try:
            try:
                con.execute(b"SET lock_timeout = 0")  # a prune of the month in progress: wait for it
                for month in sorted(set(months)):
                    con.execute(b"SELECT pg_advisory_lock_shared(%s, %s)", (_MONTH_LOCK, _month_key(month)))
            except psycopg.Error as e:
                raise StoreUnavailable(f"{self.safe_url}: {e}") from e
            yield
        finally:
            con.close()

    @contextlib.contextmanager
    def _month_claimed(self, month: str) -> Iterator[bool]:
        con = self._connect()
        try:
            try:
                row = con.execute(b"SELECT pg_try_advisory_lock(%s, %s) AS ok",
                                  (_MONTH_LOCK, _month_key(month))).fetchone()
            except psycopg.Error as e:
                raise StoreUnavailable(f"{self.safe_url}: {e}") from e
            yield bool(row and row["ok"])
        finally:
            con.close()  # and the lock with it

    def _prune_claimed(self, month: str, lo_us: int, hi_us: int, now_us: int) -> int:
        """A month's partition dropped whole (migration 012), and any of its rows that wait in
        the default partition deleted, in one transaction that holds the write lock."""
        with self._write_locked() as session:
            [row] = session.fetch(count_sql(self.mark), (lo_us, hi_us))
            n = int(row["n"])
            session.execute(keep_batch_ids_sql(self.mark), (lo_us, hi_us))
            session.execute(f"DROP TABLE IF EXISTS requests_{_month_key(month)}")
            session.execute("DELETE FROM requests_default WHERE start >= %s AND start < %s", (lo_us, hi_us))
            if n:
                session.execute(record_sql(self.mark), (month, now_us, n))
            return n

    def _delete_counted(self, session: Session, sql: str, params: tuple[object, ...]) -> int:
        [row] = session.fetch(f"WITH gone AS ({sql} RETURNING 1) SELECT COUNT(*) AS n FROM gone", params)
        return int(row["n"])

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


class _Session:
    """A migration on PostgreSQL: a whole file goes as one simple query (no parameters)."""

    def __init__(self, con: psycopg.Connection[DictRow]) -> None:
        self.con = con

    def execute(self, sql: str, params: tuple[object, ...] = ()) -> None:
        self.con.execute(sql.encode(), params)

    def fetch(self, sql: str, params: tuple[object, ...] = ()) -> list[Row]:
        return list(self.con.execute(sql.encode(), params).fetchall())

    def script(self, sql: str) -> None:
        self.con.execute(sql.encode())


class PostgresWriter:
    """The importer thread's connection, with its own staging table."""

    def __init__(self, con: psycopg.Connection[DictRow], safe_url: str) -> None:
        self.con, self.safe_url = con, safe_url
        self._months: list[tuple[int, int]] = []  # [lo, hi) of the month partitions made sure of

    def insert_many(self, records: Sequence[Record]) -> int:
        rows = [_text_safe(values_of(to_row(r))) for r in records]  # RecordRefused before any transaction begins
        try:
            self._partitions([row[_START] for row in rows])
            with self.con.transaction(), self.con.cursor() as cur:
                with cur.copy(_COPY) as copy:
                    for i, row in enumerate(rows):
                        copy.write_row((i, *row))
                if any(r.endpoint == "batch" for r in records):
                    cur.execute(_LOCK_DERIVED.encode())
                if not any(r.budget_leases for r in records):
                    cur.execute(_MOVE)
                    return cur.rowcount
                # Their reservations become their cost in this transaction (proxy/ledger/store/budgets.py).
                cur.execute(_MOVE + " RETURNING id")
                new = {row["id"] for row in cur.fetchall()}
                cur.executemany(settle_sql("%s").encode(), settlements(records, new))
                return len(new)
        except Exception as e:
            if self.con.closed or self.con.info.transaction_status != pq.TransactionStatus.IDLE:
                raise StoreUnavailable(f"{self.safe_url}: {e}") from e  # nothing to go on with: a new connection
            if isinstance(e, _REFUSALS):
                raise RecordRefused(f"{self.safe_url}: the database refused a ledger record: {e}") from e
            raise StoreUnavailable(f"{self.safe_url}: {e}") from e

    def _partitions(self, starts: Sequence[int]) -> None:
        """Make sure each UTC month the batch holds has its partition (migration 012's function),
        each in its own short transaction before the batch's, once per month per connection."""
        for us in starts:
            if any(lo <= us < hi for lo, hi in self._months):
                continue
            d = from_micros(us)
            self.con.execute(b"SELECT requests_month_partition(%s)", (d.year * 100 + d.month,))
            first = d.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
            following = (first.replace(day=28) + timedelta(days=4)).replace(day=1)
            self._months.append((to_micros(first), to_micros(following)))

    def close(self) -> None:
        with contextlib.suppress(psycopg.Error):  # a broken connection has nothing left to save
            self.con.close()


# What a record's content can make PostgreSQL (or the COPY that sends it) refuse: a value
# out of range, a constraint, a string it cannot encode; the rest is the server's trouble.
_REFUSALS = (psycopg.DataError, psycopg.IntegrityError, psycopg.errors.ProgramLimitExceeded,
             OverflowError, TypeError, ValueError)


def _month_key(month: str) -> int:
    """YYYY-MM as the integer YYYYMM, the advisory lock's second key."""
    return int(month.replace("-", ""))


def redact(url: str) -> str:
    """The URL without its password or query (which may hold one), for messages and logs."""
    return redact_url(url)  # one redaction for every spelling: unencoded '/', '@', DSNs


def _text_safe(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """PostgreSQL text cannot hold NUL, which a client can put in a model name: store U+FFFD
    rather than lose the record."""
    return tuple(v.replace("\x00", "\ufffd") if isinstance(v, str) and "\x00" in v else v for v in row)
