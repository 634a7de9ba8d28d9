"""Refusals before a key is known: one record per UTC minute and reason, written when the minute
ends (on the next refusal, on the loop's timer) and at close. The clock is injected; the journal
is a list behind the Journal interface the meter writes to; Metrics is real, on a fresh registry."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from pricing import PriceBook, default_tables_dir, load_dir
from proxy.ledger.record import Record
from proxy.metering.refusals import Refusals
from proxy.metrics.metrics import Metrics
from proxy.settings import Settings

NOON = datetime(2026, 11, 3, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


class Written(list[Record]):
    """The records journaled, in order; `arrived` is set on each."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived = asyncio.Event()

    def append(self, record: Record) -> None:
        super().append(record)
        self.arrived.set()


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def refusals(registry: CollectorRegistry, clock: Clock) -> tuple[Refusals, Written]:
    metrics = Metrics(Settings(), PriceBook(load_dir(default_tables_dir()), {}), registry)
    written = Written()
    return Refusals(written, metrics, clock), written


def counted(registry: CollectorRegistry, reason: str) -> float | None:
    return registry.get_sample_value("llmmeter_refusals_total", {"reason": reason})


def summary(records: list[Record]) -> list[tuple[datetime, list[str], int, str, int, str]]:
    return [(r.start, r.flags, r.request_count, r.tenant, r.code, r.outcome) for r in records]


def test_a_minute_of_refusals_is_one_record_per_reason(registry: CollectorRegistry) -> None:
    clock = Clock(NOON + timedelta(seconds=5))
    r, written = refusals(registry, clock)
    assert counted(registry, "missing_key") == 0 and counted(registry, "unknown_key") == 0  # there from the start
    for i in range(10_000):
        clock.now = NOON + timedelta(seconds=5, microseconds=i * 5000)  # spread over the minute
        r.refuse("missing_key" if i % 4 else "unknown_key", "chat", 0.0)
    assert written == []  # nothing per request
    assert counted(registry, "missing_key") == 7500 and counted(registry, "unknown_key") == 2500
    assert registry.get_sample_value("llmmeter_requests_total", {
        "upstream": "other", "endpoint": "chat", "model": "other", "tier": "other", "tenant": "unauthenticated",
        "code": "401", "outcome": "rejected"}) == 10_000
    clock.now = NOON + timedelta(minutes=1)
    r.tick()
    assert summary(written) == [(NOON, ["aggregated", "missing_key"], 7500, "unauthenticated", 401, "rejected"),
                                (NOON, ["aggregated", "unknown_key"], 2500, "unauthenticated", 401, "rejected")]
    assert all(rec.endpoint == "other" for rec in written)


def test_the_first_refusal_of_a_new_minute_writes_the_last_one(registry: CollectorRegistry) -> None:
    clock = Clock(NOON + timedelta(seconds=59, microseconds=999_999))
    r, written = refusals(registry, clock)
    r.refuse("missing_key", "models", 0.0)
    r.refuse("missing_key", "models", 0.0)
    r.tick()  # the minute has not ended: nothing yet
    assert written == []
    clock.now = NOON + timedelta(minutes=1)
    r.refuse("missing_key", "models", 0.0)
    assert summary(written) == [(NOON, ["aggregated", "missing_key"], 2, "unauthenticated", 401, "rejected")]
    r.close()  # at shutdown the open minute is written too
    assert [(rec.start, rec.request_count) for rec in written] == [(NOON, 2), (NOON + timedelta(minutes=1), 1)]
    r.close()
    assert len(written) == 2  # and only once


def test_the_loop_timer_writes_a_minute_that_ended_with_no_refusal_after_it(registry: CollectorRegistry) -> None:
    async def run() -> Written:
        clock = Clock(NOON + timedelta(seconds=59, microseconds=990_000))  # 10 ms before the minute ends
        r, written = refusals(registry, clock)
        r.bind(asyncio.get_running_loop())
        r.refuse("unknown_key", "other", 0.0)
        clock.now = NOON + timedelta(minutes=1, seconds=1)
        await asyncio.wait_for(written.arrived.wait(), timeout=10)
        return written

    written = asyncio.run(run())
    assert summary(written) == [(NOON, ["aggregated", "unknown_key"], 1, "unauthenticated", 401, "rejected")]


def test_an_unknown_reason_is_refused(registry: CollectorRegistry) -> None:
    r, _ = refusals(registry, Clock(NOON))
    with pytest.raises(ValueError, match="unknown refusal reason"):
        r.refuse("client-chosen", "chat", 0.0)
