"""Refusals before a key is known, written as one ledger record per UTC minute and reason.

A client without a valid key costs nothing upstream, yet one ledger row per 401 let any
client fill the disk (SPEC "Version 4 additions"). Each refusal is counted in /metrics at
once; the ledger gets, per minute and reason, one record flagged `aggregated` whose
`request_count` is how many refusals it stands for. What is held is one count per reason
for the open minute, whatever the flood: memory never grows with requests.

The open minute is written when a refusal of a later minute arrives, when a timer at the
minute's end fires, and at shutdown (`close`), so no refusal goes uncounted in the ledger.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from proxy.ledger.record import Record
from proxy.metering.meter import Journal, new_id
from proxy.metrics.metrics import Metrics
from proxy.protocol.names import AGGREGATED, REFUSAL_REASONS, UNAUTHENTICATED

Clock = Callable[[], datetime]
_MINUTE = timedelta(minutes=1)


def utc_now() -> datetime:
    return datetime.now(UTC)


class Refusals:
    """`refuse` from the event loop; `bind` the loop at start-up, `close` at shutdown."""

    def __init__(self, journal: Journal, metrics: Metrics, clock: Clock = utc_now) -> None:
        self.journal, self.metrics, self.clock = journal, metrics, clock
        self._minute: datetime | None = None  # the open minute's start (UTC)
        self._counts: dict[str, int] = {}  # reason -> refusals in the open minute; at most one key per reason
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None

    def bind(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Write the open minute at its end on this loop's timer (None: only on the next refusal or close)."""
        self._loop = loop

    def refuse(self, reason: str, endpoint: str, duration_s: float) -> None:
        """Count one refusal: at once in /metrics, and in the open minute's record."""
        if reason not in REFUSAL_REASONS:
            raise ValueError(f"unknown refusal reason {reason!r}")
        self.metrics.refused(reason, endpoint, duration_s)
        now = self.clock()
        minute = now.replace(second=0, microsecond=0)
        if self._minute != minute:
            self.flush()
            self._minute = minute
        self._counts[reason] = self._counts.get(reason, 0) + 1
        if self._timer is None and self._loop is not None:
            self._timer = self._loop.call_later(_seconds_left(minute, now), self.tick)

    def tick(self) -> None:
        """The timer's call: write the open minute once it has ended, else look again at its end."""
        self._timer = None
        if self._minute is None:
            return
        now = self.clock()
        if now >= self._minute + _MINUTE:
            self.flush()
        elif self._loop is not None:  # a timer may fire a little early
            self._timer = self._loop.call_later(_seconds_left(self._minute, now), self.tick)

    def flush(self) -> None:
        """Journal one record per reason for the open minute, and start afresh."""
        minute, counts = self._minute, self._counts
        self._minute, self._counts = None, {}
        if minute is None:
            return
        for reason in REFUSAL_REASONS:  # a fixed order: the records read the same on every replica
            n = counts.get(reason)
            if n:
                self.journal.append(aggregated_record(minute, reason, n))

    def close(self) -> None:
        """At shutdown: nothing counted stays unwritten."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.flush()


def aggregated_record(minute: datetime, reason: str, count: int) -> Record:
    """The record for `count` refusals of one reason in the minute starting at `minute`. Its
    endpoint is `other`: the refusals it stands for may have asked for any path."""
    return Record(id=new_id(), start=minute, tenant=UNAUTHENTICATED, endpoint="other", stream=False, code=401,
                  outcome="rejected", usage_source="none", flags=[AGGREGATED, reason], request_count=count)


def _seconds_left(minute: datetime, now: datetime) -> float:
    return max(0.0, (minute + _MINUTE - now).total_seconds())
