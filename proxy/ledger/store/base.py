"""What the ledger needs from a database, and the SQL that answers it, written once.

A store has a migrate step, a per-thread writer that inserts batches idempotently on the
primary key, and reads that stream. SqlStore holds every query and the migration steps;
a dialect (sqlite.py, postgres.py) brings only what truly differs: its parameter mark, its
connections and how it streams, its migration lock, its batch insert (upsert syntax and
rollup upkeep) and which of its errors mean "this record" rather than "the database".
Rows travel by column name (proxy/ledger/store/rows.py).
"""

from __future__ import annotations

import contextlib
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Protocol

from proxy.ledger.migrations import load, unknown
from proxy.ledger.record import Record
from proxy.ledger.store.batch_files import BatchFile, file_sql, note_files, note_owner, owner_sql
from proxy.ledger.store.errors import LedgerOutdated, LedgerTooNew, StoreUnavailable
from proxy.ledger.store.histograms import counted, size_percentiles, slo_rows, speed_rows
from proxy.ledger.store.minutes import MINUTE_US, MINUTES_SQL, MinuteLoad
from proxy.ledger.store.repricing import Repricing, candidates_sql
from proxy.ledger.store.retention import (
    OLDEST_SQL,
    delete_chunk_sql,
    keep_batch_ids_chunk_sql,
    pruned_sql,
    record_sql,
)
from proxy.ledger.store.rows import (
    HOUR_US,
    HourlyRow,
    Row,
    SpeedRow,
    exact,
    fold,
    from_micros,
    from_row,
    money,
    to_micros,
    whole_hours,
)
from proxy.ledger.store.slo import SloRow
from proxy.ledger.store.sql import (
    GROUP_SPLIT,
    HOURLY_SQL,
    LEDGER_ID_SQL,
    MIGRATIONS_TABLE,
    ROLLUP_SQL,
    SELECT_ROWS,
    TENANT_COST_SQL,
    grouped_sql,
)

# Migration 006 makes it: 32 lowercase hex digits, safe in a file name.
LEDGER_ID = re.compile(r"[0-9a-f]{32}\Z")


class Writer(Protocol):
    """One database connection, used by one thread only."""

    def insert_many(self, records: Sequence[Record]) -> int:
        """Insert in one transaction; ids already present are left alone. Returns rows added."""
        ...

    def close(self) -> None: ...


class Store(Protocol):
    """What the ledger and the report use of a store."""

    read_only: bool
    # Several processes on several hosts write one database: each journals in a folder of its own.
    per_replica_journal: ClassVar[bool]

    def migrate(self) -> int:
        """Apply pending numbered migrations; returns how many ran. A read-only store checks the
        versions instead (LedgerTooNew, LedgerOutdated) and returns 0."""
        ...

    def ledger_id(self) -> str:
        """The id migration 006 gave this ledger, which its journal segments name."""
        ...

    def writer(self) -> Writer: ...

    def query(self, start_from: datetime, start_to: datetime, tenant: str | None) -> Iterator[Record]:
        """Records with start in [from, to), ordered by (start, id), streamed."""
        ...

    def count(self, start_from: datetime, start_to: datetime, tenant: str | None) -> int: ...

    def cost_by_tenant(self, start_from: datetime, start_to: datetime) -> dict[str, int]:
        """Sum of cost units per tenant over [from, to), summed by the database."""
        ...

    def default_journal_dir(self) -> Path: ...

    def hourly_rows(self, start_from: datetime, start_to: datetime, tenant: str | None) -> list[HourlyRow]:
        """Sums per UTC hour and attribution key over [from, to), by name."""
        ...

    def grouped_rows(self, start_from: datetime, start_to: datetime, tenant: str | None,
                     keys: tuple[str, ...]) -> list[HourlyRow]:
        """hourly_rows() added up per value of `keys` (GROUP_KEYS), the other keys blank, by the database."""
        ...

    def hourly(self, start_from: datetime, start_to: datetime, tenant: str | None) -> list[tuple[Any, ...]]:
        """hourly_rows() as positional tuples (HourlyRow.as_tuple), for callers written before names."""
        ...

    def input_side_percentiles(self, start_from: datetime, start_to: datetime, tenant: str | None,
                               percents: Sequence[int]) -> dict[str, list[int]]:
        """Per tenant, nearest-rank percentiles of input-side tokens per metered request."""
        ...

    def minute_load(self, start_from: datetime, start_to: datetime, tenant: str | None) -> list[MinuteLoad]:
        """Per UTC minute starting in [from, to) that had load: migration 013's sums, by minute."""
        ...

    def slo(self, start_from: datetime, start_to: datetime, tenant: str | None) -> list[SloRow]:
        """Per model, tier and input-side band, how fast streamed requests with upstream usage answered."""
        ...

    def speed(self, lo_us: int | datetime, hi_us: int | datetime, tenant: str | None = None) -> list[SpeedRow]:
        """Per model and tier, how fast streamed requests with upstream usage answered in [lo, hi)."""
        ...

    def pruned_months(self, start_from: datetime, start_to: datetime) -> list[str]:
        """The UTC months overlapping [from, to) whose per-request rows were pruned (retention)."""
        ...

    def histograms_short(self, start_from: datetime, start_to: datetime) -> bool:
        """Whether a month overlapping [from, to) was pruned before migrations 015 and 016 kept its
        histograms and sums: the figures read from them are then left out."""
        ...


class Session(Protocol):
    """One migration's connection, in a transaction that holds the dialect's migration lock."""

    def execute(self, sql: str, params: tuple[object, ...] = ()) -> None: ...

    def fetch(self, sql: str, params: tuple[object, ...] = ()) -> list[Row]: ...

    def script(self, sql: str) -> None:
        """A whole migration file."""
        ...


class SqlStore(ABC):
    """The shared SQL of both dialects; subclasses supply the hooks marked abstract."""

    dialect: ClassVar[str]  # the migrations' dialect name
    mark: ClassVar[str]  # the driver's parameter mark
    id_order: ClassVar[str]  # how ids sort: by their bytes on both backends
    timestamp: ClassVar[str]  # schema_migrations.applied_at's type and default
    # The database's own clock in UTC microseconds (`now_us`), for budget leases: replicas on
    # several hosts must compare expiries with one clock. None: the one process's clock (SQLite).
    clock_sql: ClassVar[str | None]
    per_replica_journal: ClassVar[bool]

    def __init__(self, shown: str, *, read_only: bool) -> None:
        self.shown = shown  # the ledger as messages name it (no password)
        self.read_only = read_only

    # --- what a dialect brings ----------------------------------------------------------
    @abstractmethod
    def _read(self, sql: str, params: tuple[object, ...]) -> list[Row]:
        """One read on its own connection, rows by name; every failure is StoreUnavailable."""

    @abstractmethod
    def _stream(self, sql: str, params: tuple[object, ...]) -> Iterator[Row]:
        """As _read, a few rows at a time, never the whole result in memory."""

    @abstractmethod
    def _migrating(self) -> AbstractContextManager[Session]:
        """A session for migrations: committed on leaving, rolled back on an error; database
        errors surface as StoreUnavailable."""

    @abstractmethod
    def writer(self) -> Writer: ...

    @abstractmethod
    def budget_locked(self, budget: str | None) -> AbstractContextManager[Session]:
        """A transaction for a budget's leases (proxy/ledger/store/budgets.py), holding that
        budget's lock across every process sharing the ledger (no lock for None)."""

    @abstractmethod
    def default_journal_dir(self) -> Path: ...

    def _scan(self, start_from: datetime, start_to: datetime, tenant: str | None) -> tuple[str, tuple[object, ...]]:
        """A WHERE clause for summing a range row by row; a dialect may read long ranges its own way."""
        return self._range(start_from, start_to, tenant)

    def _applied(self) -> set[int]:
        return {int(row["version"]) for row in self._read("SELECT version FROM schema_migrations", ())}

    # --- schema -------------------------------------------------------------------------
    def migrate(self) -> int:
        if self.read_only:
            self._check_schema()
            return 0
        shipped = load(self.dialect)
        with self._migrating() as session:
            session.execute(MIGRATIONS_TABLE.format(timestamp=self.timestamp))
            applied = {int(row["version"]) for row in session.fetch("SELECT version FROM schema_migrations")}
            if newer := unknown(applied, shipped):
                raise LedgerTooNew(self.shown, newer)  # leaving the session rolls back
            ran = 0
            for m in shipped:
                if m.version not in applied:
                    session.script(m.sql)
                    session.execute(f"INSERT INTO schema_migrations (version, name) VALUES ({self.mark}, {self.mark})",
                                    (m.version, m.name))
                    ran += 1
            return ran

    def _check_schema(self) -> None:
        """A read-only store's migrate(): the ledger has exactly the migrations this build ships."""
        applied, shipped = self._applied(), load(self.dialect)
        if newer := unknown(applied, shipped):
            raise LedgerTooNew(self.shown, newer)
        if missing := [m.version for m in shipped if m.version not in applied]:
            raise LedgerOutdated(self.shown, missing)

    def schema_version(self) -> int:
        """The newest migration the ledger has (0: none)."""
        return max(self._applied(), default=0)

    def ledger_id(self) -> str:
        rows = self._read(LEDGER_ID_SQL, ())
        value = rows[0]["value"] if rows else None
        if not isinstance(value, str) or not LEDGER_ID.match(value):
            raise StoreUnavailable(f"{self.shown}: ledger_meta holds no ledger id of 32 hex digits ({value!r})")
        return value

    # --- batch owners and output files (proxy/ledger/store/batch_files.py) -------------
    def note_batch_owner(self, upstream: str, batch_id: str, tenant: str, at_us: int) -> None:
        """`tenant` created `batch_id` through llmmeter; StoreUnavailable on failure."""
        if self.read_only:
            raise StoreUnavailable(f"{self.shown}: opened read-only")
        with self.budget_locked(None) as session:  # one short transaction, no budget's lock
            note_owner(session, self.mark, upstream, batch_id, tenant, at_us)

    def note_batch_files(self, upstream: str, batch_id: str, file_ids: Sequence[str], at_us: int) -> None:
        """Files a batch object named as its output; StoreUnavailable on failure."""
        if self.read_only:
            raise StoreUnavailable(f"{self.shown}: opened read-only")
        with self.budget_locked(None) as session:
            note_files(session, self.mark, upstream, batch_id, file_ids, at_us)

    def batch_owner(self, upstream: str, batch_id: str) -> str | None:
        """The tenant that created `batch_id` through llmmeter, or None."""
        rows = self._read(owner_sql(self.mark), (upstream, batch_id))
        owner = rows[0]["tenant"] if rows else None
        return owner if isinstance(owner, str) else None

    def batch_file(self, upstream: str, file_id: str) -> BatchFile | None:
        """None when no batch object named `file_id` as its output through llmmeter; else its
        batch, and that batch's creator (None: llmmeter did not see it created)."""
        rows = self._read(file_sql(self.mark), (upstream, file_id))
        if not rows:
            return None
        batch_id, tenant = rows[0]["batch_id"], rows[0]["tenant"]
        return BatchFile(str(batch_id), tenant if isinstance(tenant, str) else None)

    # --- reads --------------------------------------------------------------------------
    def query(self, start_from: datetime, start_to: datetime, tenant: str | None) -> Iterator[Record]:
        where, params = self._range(start_from, start_to, tenant)
        for row in self._stream(SELECT_ROWS.format(where=where, id=self.id_order), params):
            yield from_row(row)

    def count(self, start_from: datetime, start_to: datetime, tenant: str | None) -> int:
        where, params = self._range(start_from, start_to, tenant)
        [row] = self._read(f"SELECT COUNT(*) AS n FROM requests WHERE {where}", params)
        return exact(row["n"])

    def cost_by_tenant(self, start_from: datetime, start_to: datetime) -> dict[str, int]:
        """From the rollup for the range's whole UTC hours, from the requests for the rest; added up
        in Python, so no SQL sum spans more than an hour. Tenants that spent nothing are left out."""
        lo, hi = to_micros(start_from), to_micros(start_to)
        first, last = whole_hours(lo, hi)
        m = self.mark
        costs: dict[str, int] = {}
        for row in self._read(TENANT_COST_SQL.format(where=f"hour >= {m} AND hour < {m}"),
                              (first // HOUR_US, last // HOUR_US)):
            costs[row["tenant"]] = costs.get(row["tenant"], 0) + money(row["cost_usd"], row["cost_rest"])
        for part in self._summed(lo, first, None) + self._summed(last, hi, None):
            costs[part.tenant] = costs.get(part.tenant, 0) + part.cost_units
        return {tenant: units for tenant, units in costs.items() if units}

    def hourly_rows(self, start_from: datetime, start_to: datetime, tenant: str | None) -> list[HourlyRow]:
        """Sums per UTC hour and attribution key: the range's whole UTC hours from the rollup, its
        partial first and last hours (zones with half-hour offsets, such as Asia/Kolkata) summed
        from the requests themselves."""
        lo, hi = to_micros(start_from), to_micros(start_to)
        first, last = whole_hours(lo, hi)
        m = self.mark
        where = f"hour >= {m} AND hour < {m}" + (f" AND tenant = {m}" if tenant is not None else "")
        params = (first // HOUR_US, last // HOUR_US, *((tenant,) if tenant is not None else ()))
        rolled = [HourlyRow.from_sums(row) for row in self._read(ROLLUP_SQL.format(where=where), params)]
        return self._summed(lo, first, tenant) + rolled + self._summed(last, hi, tenant)

    def grouped_rows(self, start_from: datetime, start_to: datetime, tenant: str | None,
                     keys: tuple[str, ...]) -> list[HourlyRow]:
        """hourly_rows() added up per value of `keys` (some of GROUP_KEYS), the other keys blank (0, ""
        or False): the database groups the rollup's whole hours, so a month is a few hundred rows
        however many requests it holds; the partial first and last hours join them in Python."""
        lo, hi = to_micros(start_from), to_micros(start_to)
        first, last = whole_hours(lo, hi)
        m = self.mark
        where = f"hour >= {m} AND hour < {m}" + (f" AND tenant = {m}" if tenant is not None else "")
        params = (first // HOUR_US, last // HOUR_US, *((tenant,) if tenant is not None else ()))
        rolled = [HourlyRow.from_grouped(row, GROUP_SPLIT) for row in self._read(grouped_sql(keys).format(where=where),
                                                                                 params)]
        partial = self._summed(lo, first, tenant) + self._summed(last, hi, tenant)
        return fold(rolled + partial, keys) if partial else rolled

    def hourly(self, start_from: datetime, start_to: datetime, tenant: str | None) -> list[tuple[Any, ...]]:
        return [row.as_tuple() for row in self.hourly_rows(start_from, start_to, tenant)]

    def _summed(self, lo: int, hi: int, tenant: str | None) -> list[HourlyRow]:
        """HOURLY_SQL over the requests in [lo, hi) microseconds."""
        if lo >= hi:
            return []
        where, params = self._scan(from_micros(lo), from_micros(hi), tenant)
        return [HourlyRow.from_sums(row) for row in self._read(HOURLY_SQL.format(where=where), params)]

    def input_side_percentiles(self, start_from: datetime, start_to: datetime, tenant: str | None,
                               percents: Sequence[int]) -> dict[str, list[int]]:
        """Nearest-rank percentiles of input-side tokens per metered request, per tenant, from
        migration 015's size histogram: within histograms.ERROR of the exact figures."""
        if self.histograms_short(start_from, start_to):
            return {}
        counts = self._histogram("size_histogram", start_from, start_to, tenant, ("tenant", "bucket"))
        return size_percentiles(counts, percents)

    def minute_load(self, start_from: datetime, start_to: datetime, tenant: str | None) -> list[MinuteLoad]:
        """The load of each UTC minute that starts in [from, to) and had any (migration 013's sums,
        over every tenant or one), by minute; a minute with no row was idle."""
        m = self.mark
        lo, hi = -(-to_micros(start_from) // MINUTE_US), -(-to_micros(start_to) // MINUTE_US)
        where = f"minute >= {m} AND minute < {m}" + (f" AND tenant = {m}" if tenant is not None else "")
        params = (lo, hi, *((tenant,) if tenant is not None else ()))
        rows = self._read(MINUTES_SQL.format(where=where) + " ORDER BY minute", params)
        return [MinuteLoad(exact(r["minute"]), exact(r["busy_us"]), exact(r["prefill_mtokens"]),
                           exact(r["decode_mtokens"]), exact(r["kv_token_ms"])) for r in rows]

    def speed(self, lo_us: int | datetime, hi_us: int | datetime, tenant: str | None = None) -> list[SpeedRow]:
        """Per model and tier, over streamed metered requests in [lo, hi) (microseconds since the
        epoch, or aware datetimes) that carry the upstream's own usage and a time to first token:
        their count, the median output tokens per second after the first token (output_tokens /
        ((duration_ms - ttft_ms) / 1000), over those with duration_ms > ttft_ms, in 0.01 token/s;
        0.0 when none) and the time to first token's p50 and p95. Percentiles are nearest-rank,
        from migration 015's speed histogram: within histograms.ERROR of the exact figures."""
        start_from = lo_us if isinstance(lo_us, datetime) else from_micros(lo_us)
        start_to = hi_us if isinstance(hi_us, datetime) else from_micros(hi_us)
        if self.histograms_short(start_from, start_to):
            return []
        counts = self._histogram("speed_histogram", start_from, start_to, tenant,
                                 ("model", "tier", "measure", "bucket"))
        return speed_rows(counts)

    def slo(self, start_from: datetime, start_to: datetime, tenant: str | None) -> list[SloRow]:
        """Per model, tier and input-side band (proxy/ledger/store/slo.py), over the streamed metered
        requests in [from, to) with the upstream's usage and a time to first token: the time to first
        token's p50 and p95 and the output tokens per second after it, p50 and p95, nearest rank, from
        migration 015's speed histogram."""
        if self.histograms_short(start_from, start_to):
            return []
        counts = self._histogram("speed_histogram", start_from, start_to, tenant,
                                 ("model", "tier", "band", "measure", "bucket"))
        return slo_rows(counts)

    def _histogram(self, table: str, start_from: datetime, start_to: datetime, tenant: str | None,
                   keys: tuple[str, ...]) -> dict[tuple[object, ...], int]:
        def scan(a: int, b: int, t: str | None) -> tuple[str, tuple[object, ...]]:
            return self._scan(from_micros(a), from_micros(b), t)
        return counted(self._read, scan, self.mark, table, to_micros(start_from), to_micros(start_to),
                       tenant, keys)

    def histograms_short(self, start_from: datetime, start_to: datetime) -> bool:
        """Whether a month of the range was pruned before migrations 015 and 016: their tables lack
        the deleted requests, so the figures they would give are left out rather than given short."""
        last = from_micros(to_micros(start_to) - 1)
        first = start_from.astimezone(UTC)
        m = self.mark
        rows = self._read(f"SELECT month FROM pruned_months WHERE month >= {m} AND month <= {m} "
                          "AND before_histograms = 1", (f"{first.year:04d}-{first.month:02d}",
                                                        f"{last.year:04d}-{last.month:02d}"))
        return bool(rows)

    # --- repricing (proxy/ledger/reprice.py; the SQL in proxy/ledger/store/repricing.py) ---------
    def reprice_candidates(self, start_from: datetime, start_to: datetime, after: tuple[int, str] | None,
                           only_unpriced: bool, limit: int) -> list[Record]:
        """The next `limit` records a repricing looks at, read without a lock (a dry run)."""
        sql, params = candidates_sql(self.mark, self.id_order, start_from, start_to, after, only_unpriced, limit)
        return [from_row(row) for row in self._read(sql, params)]

    @contextlib.contextmanager
    def repricing(self) -> Iterator[Repricing]:
        """One transaction that holds the ledger's write lock (imports wait for it): committed on
        leaving, rolled back on an error; database errors surface as StoreUnavailable."""
        if self.read_only:
            raise StoreUnavailable(f"{self.shown}: opened read-only")
        with self._write_locked() as session:
            yield Repricing(session, self.mark, self.id_order)

    def _write_locked(self) -> AbstractContextManager[Session]:
        """A session in one transaction holding the lock every import of a record must wait for."""
        raise NotImplementedError

    # --- retention (proxy/ledger/retention.py; the SQL in proxy/ledger/store/retention.py) ---------
    def months_in_use(self, months: Sequence[str]) -> AbstractContextManager[None]:
        """Held by reprice and reconcile over the UTC months (YYYY-MM) they read or write: a prune
        leaves a month alone while anyone holds it, and a holder waits for a prune in progress."""
        raise NotImplementedError

    def _month_claimed(self, month: str) -> AbstractContextManager[bool]:
        """The month's lock taken exclusively without waiting, for the block: False when it is in use."""
        raise NotImplementedError

    def _delete_counted(self, session: Session, sql: str, params: tuple[object, ...]) -> int:
        """Run a DELETE in the session; the rows it deleted."""
        raise NotImplementedError

    def _between_writes(self) -> None:  # noqa: B027 - PostgreSQL queues lock requests: nothing to do
        """Called between two write transactions of a long job: the imports' turn."""

    def month_in_use(self, month: str) -> bool:
        with self._month_claimed(month) as free:
            return not free

    def oldest_start_us(self) -> int | None:
        """The earliest start in the requests table, microseconds; None when it is empty."""
        [row] = self._read(OLDEST_SQL, ())
        return None if row["first"] is None else exact(row["first"])

    def prune_month(self, month: str, lo_us: int, hi_us: int, now_us: int) -> int | None:
        """Delete the requests with start in [lo, hi) (the UTC month `month`) a chunk at a time and
        note the month in pruned_months; the rows deleted, or None when the month is in use."""
        if self.read_only:
            raise StoreUnavailable(f"{self.shown}: opened read-only")
        with self._month_claimed(month) as free:
            if not free:
                return None
            return self._prune_claimed(month, lo_us, hi_us, now_us)

    def _prune_claimed(self, month: str, lo_us: int, hi_us: int, now_us: int) -> int:
        """Delete the month's rows a chunk per transaction, so imports get their turn between chunks."""
        m = self.mark
        deleted = 0
        while True:
            with self._write_locked() as session:
                session.execute(keep_batch_ids_chunk_sql(m), (lo_us, hi_us))
                n = self._delete_counted(session, delete_chunk_sql(m), (lo_us, hi_us))
                if n:
                    session.execute(record_sql(m), (month, now_us, n))
            deleted += n
            if not n:
                return deleted
            self._between_writes()

    def pruned_months(self, start_from: datetime, start_to: datetime) -> list[str]:
        """The UTC months (YYYY-MM) overlapping [from, to) whose per-request rows were pruned."""
        last = from_micros(to_micros(start_to) - 1)
        first = start_from.astimezone(UTC)
        rows = self._read(pruned_sql(self.mark), (f"{first.year:04d}-{first.month:02d}",
                                                  f"{last.year:04d}-{last.month:02d}"))
        return [str(row["month"]) for row in rows]

    def _range(self, start_from: datetime, start_to: datetime, tenant: str | None) -> tuple[str, tuple[object, ...]]:
        m, span = self.mark, (to_micros(start_from), to_micros(start_to))
        if tenant is None:
            return f"start >= {m} AND start < {m}", span
        return f"tenant = {m} AND start >= {m} AND start < {m}", (tenant, *span)
