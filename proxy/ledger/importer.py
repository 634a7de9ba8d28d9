"""The background thread that moves the backlog into the database in batches.

It owns its writer connection. When a write fails it keeps the batch, drops the
connection, backs off and tries again; `healthy` says whether writes are landing and
`problem` why not. A record the database refuses for its content is not a failure: it is
set aside (proxy/ledger/deadletter.py) and the rest of its batch lands.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from proxy.ledger.backlog import Backlog
from proxy.ledger.deadletter import DeadLetters, store_chunks, store_or_set_aside
from proxy.ledger.journal import Journal, ReadStats, Segment, read_segment
from proxy.ledger.record import Record
from proxy.ledger.replay import batches
from proxy.ledger.store.base import Store, Writer
from proxy.ledger.store.errors import LedgerReplaced

log = logging.getLogger("llmmeter.ledger")

BACKOFF_MIN_S = 0.05
BACKOFF_MAX_S = 5.0


class Importer(threading.Thread):
    def __init__(self, store: Store, backlog: Backlog, journal: Journal, dead: DeadLetters, batch_size: int,
                 interval_s: float, settled: Callable[[Sequence[Record]], None] | None = None) -> None:
        super().__init__(name="llmmeter-ledger-importer", daemon=True)
        self.store, self.backlog, self.journal, self.dead = store, backlog, journal, dead
        self.batch_size, self.interval_s = batch_size, interval_s
        self.healthy = True
        self.problem: str | None = None  # the last failure, while writes are not landing
        self.replaced = False  # the ledger file is not the one opened: no use waiting for a flush
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._writer: Writer | None = None
        # Told of each batch once it is in the database or set aside (enforced budgets settle
        # the reservations the records carry, proxy/budget/engine.py).
        self.settled = settled

    def wake(self) -> None:
        if not self._wake.is_set():
            self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        self._wake.set()
        if self.is_alive():
            self.join(timeout)

    def run(self) -> None:
        backoff = 0.0
        try:
            while not self._stopping.is_set():
                self._wake.clear()
                try:
                    full = self._step()
                except Exception as e:  # any failure keeps the records and retries; none may end the thread
                    self._failed(e)
                    backoff = min(max(backoff * 2, BACKOFF_MIN_S), BACKOFF_MAX_S)
                    self._stopping.wait(backoff)
                    continue
                backoff = 0.0
                if not self.healthy:
                    self.healthy, self.problem, self.replaced = True, None, False
                    log.warning("ledger database writable again; %d records pending", self.backlog.pending)
                if not full:
                    self._wake.wait(self.interval_s)
        finally:
            self._drop_writer()

    def _step(self) -> bool:
        """One batch, then journal upkeep; True when the batch was full (more is waiting)."""
        batch = self.backlog.take(self.batch_size)
        if batch:
            records = [item.record for item in batch]
            store_or_set_aside(self._connection(), records, self.dead)
            if self.settled is not None:
                self.settled(records)
            self.backlog.done()
            self.journal.release(item.segment for item in batch if item.segment is not None)
        for seg in self.journal.maintain(drained=self.backlog.drained()):
            self._retire(seg)
        return len(batch) >= self.batch_size

    def _retire(self, seg: Segment) -> None:
        if seg.dropped:
            # Memory let these go while the database was away; the closed segment still has them.
            stats = ReadStats()
            writer = self._connection()
            store_chunks(writer, batches(read_segment(seg.fd, stats), self.batch_size), self.dead)
            self.backlog.reimported(seg.dropped)
            log.info("re-imported %d journal records from %s", stats.records, seg.path.name)
        self.journal.discard(seg)

    def _connection(self) -> Writer:
        if self._writer is None:
            self._writer = self.store.writer()
        return self._writer

    def _failed(self, e: Exception) -> None:
        self._drop_writer()  # a fresh connection next time: the database may have restarted
        self.problem = f"ledger database write failed: {e}"
        self.replaced = isinstance(e, LedgerReplaced)
        if self.healthy:
            self.healthy = False
            log.error("ledger database write failed, %d records pending, retrying: %s", self.backlog.pending, e)

    def _drop_writer(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
