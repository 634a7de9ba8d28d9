"""The durable ledger: journal first, database in batches, journal replayed at start.

Read-only (report, export: `read_only=True`) it is only the store's reads: nothing is
created, migrated, replayed or imported. Where the journal lives, and which leftover
segments a start replays, is proxy/ledger/layout.py's to say: only this ledger's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson

from proxy.ledger.adopt import AdoptStats, adopt, check_segments, foreign_segments
from proxy.ledger.backlog import QUEUE_LIMIT, Backlog
from proxy.ledger.deadletter import DeadLetters, RetryStats, dead_letter_dir, retry
from proxy.ledger.importer import Importer
from proxy.ledger.journal import JOURNAL_JSON, SEGMENT_BYTES, Journal, encode
from proxy.ledger.layout import Layout, default_replica, layout
from proxy.ledger.record import Record
from proxy.ledger.replay import ReplayStats, replay
from proxy.ledger.retention import Pruner
from proxy.ledger.store import SqlStore, open_store

log = logging.getLogger("llmmeter.ledger")

_LOST_LOG_EVERY_S = 10.0
_EVER_FROM, _EVER_TO = datetime(1970, 1, 1, tzinfo=UTC), datetime(9999, 1, 1, tzinfo=UTC)  # every month


@dataclass(frozen=True, slots=True)
class Migrated:
    """What `llmmeter migrate` did: migrations applied, then the ledger's leftover journal imported."""

    applied: int
    schema: int  # the schema version the ledger is at now
    ledger_id: str
    replayed: ReplayStats

    def summary(self) -> str:
        r = self.replayed
        foreign = f", {r.foreign} of another ledger set aside" if r.foreign else ""
        return (f"{self.applied} migration(s) applied, schema at version {self.schema:03d} (ledger {self.ledger_id}); "
                f"journal: {r.records} leftover record(s) from {r.segments} segment(s), {r.inserted} new{foreign}")


class Ledger:
    """Call `start()` before serving, `append()` from the request path, `close()` at shutdown.

    `replica` names this process's journal folder where the store journals per process
    (PostgreSQL without `journal_dir`): unique among live processes, `<host>-<pid>` by default.
    """

    def __init__(self, url: str, journal_dir: Path | None = None, fsync: bool = False,
                 batch_size: int = 500, flush_interval_s: float = 0.05, *,
                 queue_limit: int = QUEUE_LIMIT, segment_bytes: int = SEGMENT_BYTES,
                 busy_timeout_s: float = 5.0, read_only: bool = False, replica: str | None = None,
                 keep_requests_months: int | None = None) -> None:
        self.read_only = read_only
        self.store: SqlStore = open_store(url, busy_timeout_s, read_only=read_only)
        self._configured_journal = journal_dir
        self._replica = replica or default_replica()
        # Until start() reads the ledger's id: the folder every journal of this ledger is under.
        self.journal_dir = journal_dir if journal_dir is not None else self.store.default_journal_dir()
        self.ledger_id: str | None = None
        self.batch_size = batch_size
        self.flush_interval_s = flush_interval_s
        self.last_replay = ReplayStats()
        self.foreign_waiting = 0  # segments in foreign/ at start, for `llmmeter ledger adopt`
        self._journal = Journal(self.journal_dir, fsync, segment_bytes)
        self._backlog = Backlog(queue_limit)
        self._dead = DeadLetters(dead_letter_dir(self.journal_dir))
        self._importer: Importer | None = None
        self._keep_months = keep_requests_months
        self._pruner: Pruner | None = None  # keep_requests_months: retention, daily (proxy/ledger/retention.py)
        self._lost_logged_at = float("-inf")
        self._closed = False
        # Set before start(): told of each imported batch (enforced budgets settle reservations).
        self.settled: Callable[[Sequence[Record]], None] | None = None

    # --- lifecycle ----------------------------------------------------------------------
    def start(self) -> int:
        """Migrate, replay the journal, then import in the background. Returns records replayed.
        Read-only: nothing (the store was checked when it was opened)."""
        if self._importer is not None:
            raise RuntimeError("ledger already started")
        if self.read_only:
            return 0
        self.store.migrate()
        where = self._bind()
        self.last_replay = self._replay(where)
        self.foreign_waiting = len(foreign_segments(where.replay_dirs()))
        self._journal.open()  # a journal that cannot open is reported by journal_ok, not raised
        self._importer = Importer(self.store, self._backlog, self._journal, self._dead, self.batch_size,
                                  self.flush_interval_s, self._settled)
        self._importer.start()
        if self._keep_months is not None:
            self._pruner = Pruner(self.store, self._keep_months)
            self._pruner.start()
        return self.last_replay.records

    def migrate(self) -> Migrated:
        """`llmmeter migrate`: the schema brought to this version, then this ledger's leftover journal
        segments imported; no importer starts and no new segment is made."""
        applied = self.store.migrate()
        where = self._bind()
        stats = self._replay(where)
        self._dead.close()
        return Migrated(applied, self.store.schema_version(), where.ledger_id, stats)

    def _bind(self) -> Layout:
        """Read the ledger's id (after migrating) and put the journal and dead letters where it says."""
        ledger_id = self.store.ledger_id()
        where = layout(self._configured_journal, self.store.default_journal_dir(), self.store.per_replica_journal,
                       ledger_id, self._replica)
        self.ledger_id, self.journal_dir = ledger_id, where.journal
        self._journal.bind(where.journal, ledger_id)
        self._dead.bind(where.dead_letters, ledger_id)
        return where

    def _replay(self, where: Layout) -> ReplayStats:
        where.warn_others()
        writer = self.store.writer()
        try:
            stats = replay(where.replay_dirs(), where.ledger_id, writer, self.batch_size, self._dead)
        finally:
            writer.close()
        where.tidy(stats.folders)
        return stats

    def append(self, record: Record) -> None:
        """Journal the record with one write and queue it for import; never raises, never waits on the DB."""
        self.append_many((record,))

    def append_many(self, records: Sequence[Record]) -> None:
        """As append, for several records with one write: a syscall costs more than a record's JSON."""
        try:
            kept = self._backlog.has_room()
            lines: list[bytes] = []
            journaled: list[Record] = []
            unjournaled: list[Record] = []
            for r in records:
                try:
                    lines.append(orjson.dumps(r, option=JOURNAL_JSON))  # encode(), inline: this is the request path
                    journaled.append(r)
                except TypeError:
                    try:
                        lines.append(encode(r))  # a wide integer: a cost at the caps
                        journaled.append(r)
                    except TypeError:
                        log.exception("ledger record %s cannot be journaled", r.id)
                        unjournaled.append(r)
            segment = self._journal.write(b"".join(lines), len(lines), kept) if lines else None
            queued = self._backlog.put(journaled, segment, kept)
            if unjournaled:
                queued = self._backlog.put(unjournaled, None, kept)
            if (segment is None or unjournaled) and not kept:
                self._log_lost()
                # Neither journaled nor queued: no import will settle their reservations.
                self._settled([*(journaled if segment is None else ()), *unjournaled])
            if queued >= self.batch_size and self._importer is not None:
                self._importer.wake()
        except Exception:  # the client's response matters more than these records
            log.exception("ledger append failed for %d records", len(records))

    def _settled(self, records: Sequence[Record]) -> None:
        if self.settled is not None:  # read at each batch: it may be set after start()
            self.settled(records)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything appended so far is committed; False on timeout."""
        target = self._backlog.last_seq
        importer = self._importer
        if importer is None or not importer.is_alive():
            return self._backlog.wait_committed(target, 0)
        deadline = time.monotonic() + timeout
        while True:
            importer.wake()
            left = deadline - time.monotonic()
            if self._backlog.wait_committed(target, max(0.0, min(left, self.flush_interval_s))):
                return True
            if left <= 0 or importer.replaced:  # nothing lands until the file is back: no use waiting
                return False

    def close(self, timeout: float = 10.0) -> None:
        """Flush (up to `timeout`), stop the importer, close the journal; what did not land stays journaled."""
        if self._closed:
            return
        self._closed = True
        if self._pruner is not None:
            self._pruner.stop()
        if self._importer is not None:
            if not self.flush(timeout):
                log.warning("ledger closed with %d records not yet in the database (kept in the journal)",
                            self.pending)
            self._importer.stop()
        self._journal.close()
        self._dead.close()

    # --- state --------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Records appended but not yet committed."""
        return self._backlog.pending

    @property
    def healthy(self) -> bool:
        """Database writes are succeeding."""
        return self._importer.healthy if self._importer is not None else True

    @property
    def journal_ok(self) -> bool:
        return self._journal.ok

    @property
    def problem(self) -> str | None:
        """Why records are not landing (database or journal), while they are not."""
        importer = self._importer
        if importer is not None and not importer.healthy and importer.problem:
            return importer.problem
        return self._journal.problem

    @property
    def rejected(self) -> int:
        """Records the database refused for their content, set aside as dead letters (SPEC metric
        llmmeter_ledger_rejected_records_total)."""
        return self._dead.count

    @property
    def dead_letter_dir(self) -> Path:
        return self._dead.directory

    def retry_dead_letters(self) -> RetryStats:
        """`llmmeter ledger retry`: import the dead letters again (a live ledger's own file is left to
        it); what the database still refuses goes to a new dead-letter file."""
        self.store.migrate()
        where = self._bind()
        writer = self.store.writer()
        try:
            return retry(writer, where.dead_letter_dirs(), self.batch_size, where.ledger_id)
        finally:
            writer.close()

    def adopt(self, segments: Sequence[Path] = ()) -> AdoptStats:
        """`llmmeter ledger adopt`: import the segments named (default: every one in this ledger's
        journal folders' `foreign/`), idempotently by record id (proxy/ledger/adopt.py)."""
        named = check_segments(segments)  # a wrong path is refused before the ledger is touched
        self.store.migrate()
        where = self._bind()
        writer = self.store.writer()
        try:
            pruned = frozenset(self.store.pruned_months(_EVER_FROM, _EVER_TO))
            return adopt(named or foreign_segments(where.replay_dirs()), writer, self.batch_size, self._dead, pruned)
        finally:
            writer.close()
            self._dead.close()

    @property
    def lost(self) -> int:
        """Records neither journaled nor held in memory (journal down and queue full)."""
        return self._backlog.lost

    # --- reads --------------------------------------------------------------------------
    def rows(self, start_from: datetime, start_to: datetime, tenant: str | None = None) -> Iterator[Record]:
        """Records with start in [from, to), ordered by (start, id), streamed from a cursor."""
        return self.store.query(start_from, start_to, tenant)

    def count(self, start_from: datetime, start_to: datetime, tenant: str | None = None) -> int:
        return self.store.count(start_from, start_to, tenant)

    def month_to_date_cost(self, now: datetime) -> dict[str, int]:
        """Cost units per tenant in the UTC calendar month of `now`, summed by the database."""
        now = (now if now.tzinfo is not None else now.replace(tzinfo=UTC)).astimezone(UTC)
        first = datetime(now.year, now.month, 1, tzinfo=UTC)
        following = (first + timedelta(days=32)).replace(day=1)
        return self.store.cost_by_tenant(first, following)

    def _log_lost(self) -> None:
        now = time.monotonic()
        if now - self._lost_logged_at >= _LOST_LOG_EVERY_S:
            self._lost_logged_at = now
            log.error("ledger journal down and memory queue full: %d records lost so far", self._backlog.lost)
