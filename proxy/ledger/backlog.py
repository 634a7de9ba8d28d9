"""Records appended but not yet committed: a bounded FIFO the importer drains in batches."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from proxy.ledger.journal import Segment
from proxy.ledger.record import Record

QUEUE_LIMIT = 100_000


@dataclass(slots=True)
class Item:
    seq: int
    record: Record
    segment: Segment | None  # None: the journal did not take it, memory is its only copy


class Backlog:
    def __init__(self, limit: int = QUEUE_LIMIT) -> None:
        self.limit = limit
        self._cond = threading.Condition()
        self._queue: deque[Item] = deque()
        self._inflight: list[Item] = []
        self._seq = 0
        self.appended = 0
        self.committed = 0
        self.dropped = 0  # in the journal only, waiting to be re-read from it
        self.lost = 0  # in neither journal nor memory

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def pending(self) -> int:
        return self.appended - self.committed - self.lost

    @property
    def last_seq(self) -> int:
        return self._seq

    def has_room(self) -> bool:
        return len(self._queue) < self.limit

    def put(self, records: Sequence[Record], segment: Segment | None, kept: bool) -> int:
        """Count the appends; keep them when there was room. Returns the queue's length."""
        with self._cond:
            if kept:
                seq = self._seq
                self._queue.extend(Item(seq + i, r, segment) for i, r in enumerate(records, 1))
            elif segment is not None:
                self.dropped += len(records)
            else:
                self.lost += len(records)
            self._seq += len(records)
            self.appended += len(records)
            return len(self._queue)

    def take(self, n: int) -> list[Item]:
        """The oldest records; the same batch again until done() says it committed."""
        with self._cond:
            if not self._inflight and self._queue:
                q = self._queue
                self._inflight = [q.popleft() for _ in range(min(n, len(q)))]
            return list(self._inflight)

    def done(self) -> None:
        with self._cond:
            self.committed += len(self._inflight)
            self._inflight = []
            self._cond.notify_all()

    def reimported(self, n: int) -> None:
        """n dropped records were re-read from a journal segment and committed."""
        with self._cond:
            self.dropped -= n
            self.committed += n
            self._cond.notify_all()

    def drained(self) -> bool:
        with self._cond:
            return not self._queue and not self._inflight

    def wait_committed(self, seq: int, timeout: float) -> bool:
        """True once every record appended up to `seq` is in the database (or lost)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._committed_through(seq):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def _committed_through(self, seq: int) -> bool:
        head = self._inflight[0].seq if self._inflight else self._queue[0].seq if self._queue else seq + 1
        return head > seq and self.dropped == 0
