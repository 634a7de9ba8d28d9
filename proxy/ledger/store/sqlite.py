"""The SQLite ledger: WAL, one writer connection per importer thread, readers on their own.

The file a store first opens is the ledger for the life of the store: writers reopen it
only by that path and only while the path still names that file (device and inode), so
a ledger removed or replaced under a running llmmeter stops the writes (LedgerReplaced)
and the records wait in the journal, instead of going into a deleted file or a stranger.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path
from urllib.parse import quote

from proxy.errors import LLMMeterError
from proxy.ledger.record import Record
from proxy.ledger.store.base import Session, SqlStore
from proxy.ledger.store.budgets import settle_sql, settlements
from proxy.ledger.store.errors import LedgerMissing, LedgerReplaced, RecordRefused, StoreUnavailable
from proxy.ledger.store.histograms import add_sql, size_values, speed_values
from proxy.ledger.store.minutes import SQLITE_ADD_MINUTES
from proxy.ledger.store.rows import COLUMNS, Row, to_row, values_of
from proxy.ledger.store.sql import HOURLY_SQL
from proxy.ledger.store.uncertain import add_uncertain_sql, uncertain_values

# The ledger holds end_user: created owner read-write and group read-only (and, as ever,
# narrowed by the umask). SQLite gives its -wal and -shm files the database file's mode.
FILE_MODE = 0o640
DIR_MODE = 0o750
_ROW = f"({', '.join('?' * len(COLUMNS))})"
_ID_QUERY = 500  # ids per lookup in pruned_batch_ids: far below SQLite's limit on parameters
# Batches go in as multi-row INSERTs of power-of-two sizes (a handful of cached statements).
# sqlite3 releases the GIL around each statement step, and a busy event loop keeps the
# importer waiting up to a switch interval to get it back: per-row steps starved it.
_CHUNKS = (256, 128, 64, 32, 16, 8, 4, 2, 1)  # 256 rows x 37 columns stays under SQLite's 32766 variables
_FETCH = 1024
_DENSE = 4  # read a rowid run when at most this many rowids per row in range
_UNITS = 10**10
# Migration 004: the batch's new rows are added to 002's rollup and 003's histogram here;
# 005: money in whole dollars and the units below one, so no addition can overflow; 007: the
# band joins the key, and 1-hour cache writes, web search calls, fees and provider cost (money
# in the same two parts) are summed beside the rest.
_ROLLUP_KEY = "hour, model, unpriced_model, tier, upstream, tenant, tag, workload, metered, price_band"
_ADD_TO_ROLLUP = f"""
INSERT INTO hourly_rollup ({_ROLLUP_KEY}, requests,
                           input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, reasoning_tokens,
                           estimated, unpriced, cost_usd, cost_units, cache_write_1h_tokens, web_search_calls,
                           fee_usd, fee_units, provider_cost_usd, provider_cost_units, provider_costed)
SELECT {_ROLLUP_KEY}, requests,
       input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, reasoning_tokens, estimated, unpriced,
       cost_usd + cost_rest / {_UNITS}, cost_rest % {_UNITS}, cache_write_1h_tokens, web_search_calls,
       fee_usd + fee_rest / {_UNITS}, fee_rest % {_UNITS},
       provider_cost_usd + provider_cost_rest / {_UNITS}, provider_cost_rest % {_UNITS}, provider_costed
FROM ({HOURLY_SQL.format(where="rowid > ?")}) AS batch WHERE true
ON CONFLICT ({_ROLLUP_KEY}) DO UPDATE SET
    requests = requests + excluded.requests,
    input_tokens = input_tokens + excluded.input_tokens,
    cache_read_tokens = cache_read_tokens + excluded.cache_read_tokens,
    cache_write_tokens = cache_write_tokens + excluded.cache_write_tokens,
    output_tokens = output_tokens + excluded.output_tokens,
    reasoning_tokens = reasoning_tokens + excluded.reasoning_tokens,
    estimated = estimated + excluded.estimated,
    unpriced = unpriced + excluded.unpriced,
    cost_usd = cost_usd + excluded.cost_usd + (cost_units + excluded.cost_units) / {_UNITS},
    cost_units = (cost_units + excluded.cost_units) % {_UNITS},
    cache_write_1h_tokens = cache_write_1h_tokens + excluded.cache_write_1h_tokens,
    web_search_calls = web_search_calls + excluded.web_search_calls,
    fee_usd = fee_usd + excluded.fee_usd + (fee_units + excluded.fee_units) / {_UNITS},
    fee_units = (fee_units + excluded.fee_units) % {_UNITS},
    provider_cost_usd = provider_cost_usd + excluded.provider_cost_usd
                        + (provider_cost_units + excluded.provider_cost_units) / {_UNITS},
    provider_cost_units = (provider_cost_units + excluded.provider_cost_units) % {_UNITS},
    provider_costed = provider_costed + excluded.provider_costed"""
# Migration 015's histograms and 016's sums of uncertain requests, from the batch's new rows.
_ADD_TO_HISTOGRAMS = (add_sql("speed_histogram", speed_values("requests", "rowid > ?")),
                      add_sql("size_histogram", size_values("requests", "rowid > ?")))
_ADD_UNCERTAIN = add_uncertain_sql(uncertain_values("requests", "rowid > ?"))
# What a record's content can make SQLite refuse; anything else is the database's trouble.
_REFUSALS = ("SQLITE_CONSTRAINT", "SQLITE_MISMATCH", "SQLITE_TOOBIG", "SQLITE_RANGE")

FileId = tuple[int, int]  # (st_dev, st_ino)
# SQLite grants its lock to whoever asks first, and a waiting import polls it every 100 ms:
# a long prune leaves it that long between chunks, or it starves a running serve's importer.
_YIELD_S = 0.1


class SqliteStore(SqlStore):
    dialect = "sqlite"
    mark = "?"
    id_order = "id"
    timestamp = "TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP"
    clock_sql = None  # one process holds the budget's leases: its own clock is the only one
    per_replica_journal = False  # one file on one host: its processes share the journal beside it

    def __init__(self, path: Path, busy_timeout_s: float = 5.0, *, read_only: bool = False,
                 url: str | None = None) -> None:
        super().__init__(url or str(path), read_only=read_only)
        self.path = path
        self.busy_timeout_s = busy_timeout_s
        self.url = self.shown
        self._identity: FileId | None = None  # the file this store opened first: the only one it writes
        self._immutable = False  # a snapshot no writer can change: read without locks

    def default_journal_dir(self) -> Path:
        return self.path.parent / "journal"

    # --- connections ----------------------------------------------------------------------
    def _connect(self, mode: str) -> sqlite3.Connection:
        """`rwc` may create the file (the first open), `rw` needs it (and reads only where the file
        is write-protected), `ro` is a snapshot's: immutable, no locks, no -shm or -wal made."""
        try:
            if mode == "rwc":
                _create_private(self.path)
            uri = f"file:{quote(str(self.path.absolute()))}?mode={'ro&immutable=1' if mode == 'ro' else 'rw'}"
            # isolation_level=None: transactions are spelled out, never begun implicitly.
            con = sqlite3.connect(uri, timeout=self.busy_timeout_s, isolation_level=None, uri=True)
            con.row_factory = sqlite3.Row
            con.execute("PRAGMA synchronous=NORMAL")
            return con
        except (sqlite3.Error, OSError) as e:
            raise StoreUnavailable(f"{self.path}: {e}") from e

    def _reader(self) -> sqlite3.Connection:
        # Never `rwc`: a read must not make an empty ledger where one went missing. Not `mode=ro`
        # either, but where it must: a read-only WAL reader leaves a -shm and -wal behind it.
        con = self._connect("ro" if self._immutable else "rw")
        con.execute("PRAGMA query_only=ON")
        return con

    def _open_writable(self) -> tuple[sqlite3.Connection, FileId]:
        """A read-write connection to the store's own file, which it is still at the path."""
        if self.read_only:
            raise StoreUnavailable(f"{self.url}: opened read-only")
        first = self._identity is None
        before = _file_id(self.path)
        if not first and before != self._identity:
            raise _replaced(self.path, before)
        con = self._connect("rwc" if first else "rw")
        after = _file_id(self.path)
        if after is None or (before is not None and after != before) or (not first and after != self._identity):
            con.close()  # the path changed while it was opened: which file the connection has is unknown
            raise _replaced(self.path, after)
        if first:
            self._identity = after
        return con, after

    def _read(self, sql: str, params: tuple[object, ...]) -> list[Row]:
        con = self._reader()
        try:
            rows: list[Row] = con.execute(sql, params).fetchall()
            return rows
        except sqlite3.Error as e:
            raise StoreUnavailable(f"{self.path}: {e}") from e
        finally:
            con.close()

    def _stream(self, sql: str, params: tuple[object, ...]) -> Iterator[Row]:
        con = self._reader()
        try:
            # Plain dicts, not sqlite3.Row, whose lookups by name scan the columns: an export reads millions.
            cur = con.cursor()
            cur.row_factory = None
            cur.execute(sql, params)
            names = [d[0] for d in cur.description]
            while batch := cur.fetchmany(_FETCH):
                for values in batch:
                    yield dict(zip(names, values))  # noqa: B905 - a row has one value per described column
        except sqlite3.Error as e:
            raise StoreUnavailable(f"{self.path}: {e}") from e
        finally:
            con.close()

    # --- schema ---------------------------------------------------------------------------
    def _migrating(self) -> AbstractContextManager[Session]:
        # IMMEDIATE takes the write lock first, so two workers starting together apply each migration once.
        return self._immediate(wal=True, failed="migration failed: ")

    def _write_locked(self) -> AbstractContextManager[Session]:
        """SQLite's write lock (BEGIN IMMEDIATE): an import waits up to its busy timeout, then retries."""
        return self._immediate()

    def budget_locked(self, budget: str | None) -> AbstractContextManager[Session]:
        """The same write lock: budget grants, renewals and imports take turns (one process serves a
        SQLite ledger with an enforced budget)."""
        return self._immediate()

    @contextlib.contextmanager
    def _immediate(self, wal: bool = False, failed: str = "") -> Iterator[Session]:
        """A transaction on a fresh writable connection that holds the write lock from its start."""
        con, _ = self._open_writable()
        try:
            if wal:
                con.execute("PRAGMA journal_mode=WAL")
            con.execute("BEGIN IMMEDIATE")
            yield _Session(con)
            con.execute("COMMIT")
        except BaseException as e:
            if con.in_transaction:
                con.execute("ROLLBACK")
            if isinstance(e, sqlite3.Error):
                raise StoreUnavailable(f"{self.path}: {failed}{e}") from e
            raise
        finally:
            con.close()

    # --- months in use (retention) -------------------------------------------------------
    # One lock file per UTC month beside the ledger (`<db>.months/YYYY-MM.lock`): reprice and
    # reconcile flock it shared while they use the month, a prune exclusively and without
    # waiting. One SQLite file is served from one host, so flock reaches every process that
    # uses it, and a process that dies lets go of its locks with it.
    def _month_lock(self, month: str, create: bool) -> int | None:
        folder = self.path.with_name(self.path.name + ".months")
        path = folder / f"{month}.lock"
        try:
            if create:
                folder.mkdir(mode=DIR_MODE, exist_ok=True)
                return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            if create:
                raise StoreUnavailable(f"{self.path}: cannot make the lock file of month {month}: {e}") from e
            return None

    @contextlib.contextmanager
    def months_in_use(self, months: Sequence[str]) -> Iterator[None]:
        fds: list[int] = []
        try:
            for month in sorted(set(months)):
                try:
                    fd = self._month_lock(month, create=True)
                except StoreUnavailable:
                    # A reader without write access to the ledger's folder: the lock file a prune
                    # makes, when there is one, is enough to hold (a shared flock needs no write).
                    fd = self._month_lock(month, create=False)
                if fd is not None:
                    fds.append(fd)
                    fcntl.flock(fd, fcntl.LOCK_SH)  # waits for a prune of the month in progress
            yield
        finally:
            _close_all(fds)

    @contextlib.contextmanager
    def _month_claimed(self, month: str) -> Iterator[bool]:
        # A read-only store (a dry run) makes no file: where there is none, nobody holds the month.
        fd = self._month_lock(month, create=not self.read_only)
        if fd is None:
            yield True
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def _delete_counted(self, session: Session, sql: str, params: tuple[object, ...]) -> int:
        session.execute(sql, params)
        [row] = session.fetch("SELECT changes() AS n")
        return int(row["n"])

    def _between_writes(self) -> None:
        time.sleep(_YIELD_S)

    def _applied(self) -> set[int]:
        """The file exists and is a ledger; a snapshot no writer can change is read as it is."""
        if not self.path.is_file():
            raise LedgerMissing(f"{self.url}: no ledger at {self.path} (a read-only command never creates one)")
        wal = self.path.with_name(self.path.name + "-wal")
        snapshot = not os.access(self.path.parent, os.W_OK) or not self.path.stat().st_mode & 0o222
        if snapshot and not wal.exists():
            # No WAL either: read without the -shm and -wal a WAL-mode reader would otherwise
            # create beside it (and that root could).
            self._immutable = True
        try:
            return super()._applied()
        except StoreUnavailable as e:
            raise StoreUnavailable(f"{self.url}: not a readable llmmeter ledger: {e.__cause__ or e}") from e

    def writer(self) -> SqliteWriter:
        con, identity = self._open_writable()
        return SqliteWriter(con, self.path, identity)

    # --- reads ----------------------------------------------------------------------------
    def _scan(self, start_from: datetime, start_to: datetime, tenant: str | None) -> tuple[str, tuple[object, ...]]:
        """A WHERE clause for reading a long range row by row.

        Rows arrive, and so are numbered, in roughly time order, so a month is a run of
        rowids: reading that run straight through is several times faster than fetching
        each row through the start index. The start (and tenant) conditions stay, so the
        answer is exact whatever the order; when the run is much wider than the rows in
        range (records imported far out of order), the index is used as before.
        """
        where, params = self._range(start_from, start_to, None)
        [run] = self._read(f"SELECT MIN(rowid) AS first, MAX(rowid) AS last, COUNT(*) AS n FROM requests "
                           f"WHERE {where}", params)
        first, last, n = run["first"], run["last"], run["n"]
        if not n or last - first + 1 > _DENSE * n:
            return self._range(start_from, start_to, tenant)
        # The unary + keeps SQLite from choosing an index on these columns over the rowid run.
        where = "rowid BETWEEN ? AND ? AND +start >= ? AND +start < ?"
        params = (first, last, *params)
        if tenant is not None:
            where, params = where + " AND +tenant = ?", (*params, tenant)
        return where, params


class _Session:
    """A migration on SQLite: statements one at a time, as SQLite itself splits a script."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con

    def execute(self, sql: str, params: tuple[object, ...] = ()) -> None:
        self.con.execute(sql, params)

    def fetch(self, sql: str, params: tuple[object, ...] = ()) -> list[Row]:
        rows: list[Row] = self.con.execute(sql, params).fetchall()
        return rows

    def script(self, sql: str) -> None:
        for statement in _statements(sql):
            self.con.execute(statement)


class SqliteWriter:
    """The importer thread's connection. A failure of the database or its file surfaces as
    StoreUnavailable (LedgerReplaced when the file is no longer this one), a record the
    database refuses as RecordRefused; either way no transaction is left open."""

    def __init__(self, con: sqlite3.Connection, path: Path, identity: FileId) -> None:
        self.con, self.path = con, path
        self._wal_path = path.with_name(path.name + "-wal")
        self._files: list[tuple[Path, FileId]] = [(path, identity)]  # and its WAL, once written

    def insert_many(self, records: Sequence[Record]) -> int:
        rows = [values_of(to_row(r)) for r in records]  # RecordRefused before any transaction begins
        con = self.con
        try:
            con.execute("BEGIN IMMEDIATE")
            self._still_ours()
            if gone := _pruned_batch_ids(con, records):
                # Batch results billed before their month was pruned: skipped as an id still in requests is.
                rows = [row for row, r in zip(rows, records, strict=True) if r.id not in gone]
            # New rows get rowids above the largest so far; duplicates skipped get none.
            before = con.execute("SELECT COALESCE(MAX(rowid), 0) AS last FROM requests").fetchone()["last"]
            added, at = 0, 0
            for size in _CHUNKS:
                while len(rows) - at >= size:
                    params = [v for row in rows[at:at + size] for v in row]
                    added += con.execute(_insert(size), params).rowcount
                    at += size
            if added:
                con.execute(_ADD_TO_ROLLUP, (before,))
                con.execute(_ADD_TO_HISTOGRAMS[0], (before, before))
                con.execute(_ADD_TO_HISTOGRAMS[1], (before,))
                con.execute(_ADD_UNCERTAIN, (before,))
                con.execute(SQLITE_ADD_MINUTES, (before,))  # migration 013's per-minute load
                if any(r.budget_leases for r in records):  # their reservations become their cost, here
                    new = None if added == len(records) else {
                        row["id"] for row in con.execute("SELECT id FROM requests WHERE rowid > ?", (before,))}
                    con.executemany(settle_sql("?"), settlements(records, new))
            con.execute("COMMIT")
        except Exception as e:
            self._roll_back(e)
            if isinstance(e, LLMMeterError):
                raise
            raise _classify(e, self.path) from e
        if len(self._files) == 1 and (wal := _file_id(self._wal_path)) is not None:
            self._files.append((self._wal_path, wal))
        # A file removed or replaced before COMMIT may hold this batch: the caller keeps it for the real one.
        self._still_ours()
        return added

    def _still_ours(self) -> None:
        for path, identity in self._files:
            now = _file_id(path)
            if now != identity:
                raise _replaced(path, now)

    def _roll_back(self, cause: Exception) -> None:
        try:
            if self.con.in_transaction:
                self.con.execute("ROLLBACK")
        except sqlite3.Error as e:
            raise StoreUnavailable(f"{self.path}: cannot roll back after {cause}: {e}") from e

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):  # a broken connection has nothing left to save
            self.con.close()


def _pruned_batch_ids(con: sqlite3.Connection, records: Sequence[Record]) -> set[str]:
    """The batch results' ids among `records` that a prune kept in pruned_batch_ids (migration 017)."""
    ids = [r.id for r in records if r.endpoint == "batch"]  # proxy.protocol.names.BATCH
    gone: set[str] = set()
    for at in range(0, len(ids), _ID_QUERY):
        part = ids[at:at + _ID_QUERY]
        gone.update(row["id"] for row in con.execute(
            f"SELECT id FROM pruned_batch_ids WHERE id IN ({', '.join('?' * len(part))})", part))
    return gone


def _classify(e: Exception, path: Path) -> LLMMeterError:
    """RecordRefused for what a record's values cause, StoreUnavailable for everything else."""
    if isinstance(e, (OverflowError, TypeError, ValueError)):  # a value SQLite cannot bind (int beyond 64 bits)
        return RecordRefused(f"{path}: {e}")
    if isinstance(e, sqlite3.Error):
        name = getattr(e, "sqlite_errorname", "") or ""
        if (isinstance(e, (sqlite3.IntegrityError, sqlite3.DataError)) or name.startswith(_REFUSALS)
                or str(e) == "integer overflow" or (isinstance(e, sqlite3.ProgrammingError) and "binding" in str(e))):
            return RecordRefused(f"{path}: {e}")
    return StoreUnavailable(f"{path}: {e}")


def _close_all(fds: Iterable[int]) -> None:
    for fd in fds:
        os.close(fd)


def _file_id(path: Path) -> FileId | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _replaced(path: Path, now: FileId | None) -> LedgerReplaced:
    what = "was removed" if now is None else "was replaced by another file"
    return LedgerReplaced(f"ledger file {path} {what} after this process opened it: nothing is written until "
                          "the same file is back at that path (or llmmeter restarts with the new one); "
                          "records wait in the journal")


def _create_private(path: Path) -> None:
    """Create the ledger file with FILE_MODE before SQLite does (it would use 0644)."""
    path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):  # another worker made it first
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE))


@functools.cache
def _insert(rows: int) -> str:
    return (f"INSERT INTO requests ({', '.join(COLUMNS)}) VALUES {', '.join([_ROW] * rows)} "
            "ON CONFLICT (id) DO NOTHING")


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
