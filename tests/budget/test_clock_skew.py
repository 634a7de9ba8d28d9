"""Leases expire by one clock (issue 32, item 2): two real `llmmeter serve` replicas on one
PostgreSQL ledger, one of them with its wall clock two minutes behind. The slow replica takes
the budget's room for requests that are still running; the other must see that room as taken,
so the period's billed cost stays within the limit plus the flagged overrun."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from tests.budget.burst import (
    OPENAI_MAX,
    OPENAI_MODEL,
    PROMPT_TOKENS,
    billed,
    budget_config,
    day_period,
    noon_zone,
    settled_rows,
)
from tests.budget.skew import skewed_env
from tests.fake_upstream import FakeUpstream
from tests.serve import Served

pytestmark = pytest.mark.timeout(180)
BUDGET = "skewed"
LIMIT_UNITS = 500_000_000  # $0.05: room for 7 calls reserved ~ $0.0065 each
CALLS = 12  # to each replica


def body(i: int) -> dict[str, Any]:
    return {"model": OPENAI_MODEL, "max_tokens": OPENAI_MAX,
            "messages": [{"role": "user", "content": f"call {i:03d}"}]}


HEADERS = {"x-fake-hang": "1",  # parked at the upstream, holding its reservation, until release()
           "x-fake-usage": json.dumps({"prompt": PROMPT_TOKENS, "completion": OPENAI_MAX})}


async def parked(client: httpx.AsyncClient, fake: FakeUpstream, first: int) -> list[asyncio.Task[httpx.Response]]:
    """CALLS requests at once, returned once each is parked at the upstream or refused."""
    tasks = [asyncio.ensure_future(client.post("/chat/completions", json=body(first + i), headers=HEADERS))
             for i in range(CALLS)]
    seen = len(fake.requests)
    while True:
        arrived = sum(1 for r in list(fake.requests) if int(r["json"]["messages"][0]["content"][5:]) >= first)
        if arrived + sum(1 for t in tasks if t.done()) >= CALLS:
            assert all(t.result().status_code == 429 for t in tasks if t.done())
            assert len(fake.requests) >= seen
            return tasks
        await asyncio.sleep(0.01)


async def run(replicas: Sequence[Served], fake: FakeUpstream) -> list[int]:
    async with (httpx.AsyncClient(base_url=replicas[0].base_url, timeout=60) as slow,
                httpx.AsyncClient(base_url=replicas[1].base_url, timeout=60) as right):
        held = await parked(slow, fake, 0)  # the slow replica's leases now hold the room
        held += await parked(right, fake, 100)
        fake.release()
        return [r.status_code for r in await asyncio.gather(*held)]


def test_a_replica_whose_clock_is_behind_cannot_have_its_room_handed_out_again(fake: FakeUpstream, serve: Any,
                                                                                pg_url: str) -> None:
    now = datetime.now(UTC)
    zone = noon_zone(now)
    lo, hi = day_period(zone, now)
    config = budget_config(BUDGET, "0.05", zone)
    replicas = [serve(upstream=fake.base_url, config=config, db=pg_url, env=skewed_env(-120)),
                serve(upstream=fake.base_url, config=config, db=pg_url)]
    statuses = asyncio.run(run(replicas, fake))
    assert set(statuses) <= {200, 429}, statuses
    rows = settled_rows(replicas[1], 2 * CALLS)
    assert len(rows) == 2 * CALLS
    b = billed(rows, BUDGET, lo, hi)
    admitted = statuses.count(200)
    print(f"{admitted} of {2 * CALLS} admitted; billed {b.billed / 1e10} USD of 0.05, overrun {b.overrun / 1e10}")
    assert admitted >= 1
    assert b.billed <= LIMIT_UNITS + b.overrun, (
        f"billed {b.billed / 1e10} USD > limit 0.05 + flagged overrun {b.overrun / 1e10}")
