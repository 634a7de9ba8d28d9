"""A client that leaves a stream before its usage cannot make a budget count less than the
provider bills (issue 32, item 1). The upstream plays a reasoning model: 50,004 output tokens,
50,000 of them reasoning, reported in the usage chunk that comes last. The client reads the first
event and hangs up; llmmeter never sees the usage, and an estimate from the relayed text counts
almost nothing. The provider has billed the reasoning all the same. Real `llmmeter serve`, the
fake upstream as the provider, the ledger read back."""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal
from typing import Any

import httpx
import pytest

from tests.budget.burst import settled_rows
from tests.fake_upstream import FakeUpstream

pytestmark = pytest.mark.timeout(180)
TAG = "reasoning-team"
LIMIT = Decimal("1")
PROMPT, COMPLETION, REASONING = 12, 50_004, 50_000
# What the provider bills for each request that reached it: gpt-test's standard prices ($1.50 in,
# $6 out a million, tests/data/prices/test-models.toml); the reasoning is billed as output.
PROVIDER_BILL = (PROMPT * Decimal("1.50") + COMPLETION * Decimal("6.00")) / 1_000_000
UNITS = 10**10
CALLS = 6


def config() -> str:
    return f'[[budget]]\nname = "{TAG}"\ntag = "{TAG}"\nlimit_usd = "{LIMIT}"\nmode = "enforce"\n'


async def leave_after_first_event(base_url: str, i: int) -> int:
    body: dict[str, Any] = {"model": "gpt-test", "stream": True, "max_completion_tokens": 60_000,
                            "messages": [{"role": "user", "content": f"prove it {i}"}]}
    headers = {"x-llmmeter-tag": TAG, "x-fake-hold": "1",  # the upstream parks after its first event
               "x-fake-usage": json.dumps({"prompt": PROMPT, "completion": COMPLETION, "reasoning": REASONING})}
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client, \
            client.stream("POST", "/chat/completions", json=body, headers=headers) as r:
        if r.status_code == 200:
            async for _ in r.aiter_bytes():
                break  # the first event is in: hang up before the usage
        return r.status_code


def test_a_client_leaving_before_the_usage_never_takes_the_bill_past_the_limit(fake: FakeUpstream,
                                                                               serve: Any) -> None:
    s = serve(upstream=fake.base_url, config=config())
    statuses = []
    for i in range(CALLS):  # one at a time, each settled before the next: the tester's sequence
        statuses.append(asyncio.run(leave_after_first_event(s.base_url, i)))
        settled_rows(s, i + 1)
    rows = [r for r in settled_rows(s, CALLS) if r["tag"] == TAG]
    assert len(rows) == CALLS and set(statuses) <= {200, 429}, statuses
    reached = sum(1 for r in list(fake.requests) if b"prove it" in r["body"])
    assert reached == statuses.count(200) >= 1
    provider_billed = reached * PROVIDER_BILL
    admitted = [r for r in rows if r["outcome"] != "rejected"]
    overrun = sum(r["cost_units"] - r["reserved_units"] for r in admitted if "over_reservation" in r["flags"])
    spent = sum(r["cost_units"] or 0 for r in rows)
    print(f"{reached} of {CALLS} reached the provider, which billed {provider_billed} USD; "
          f"the budget counts {Decimal(spent) / UNITS} USD of {LIMIT}")
    assert provider_billed * UNITS <= LIMIT * UNITS + overrun, (
        f"the provider billed {provider_billed} USD against a {LIMIT} USD limit, flagged overrun {overrun}")
    assert spent >= provider_billed * UNITS  # the budget never counts less than the provider bills
    for r in admitted:
        assert r["outcome"] == "client_closed" and r["usage_source"] == "estimated", r
        # Its usage unseen, the request counts as the worst case it was admitted under, flagged so.
        assert r["cost_units"] == r["reserved_units"] and "usage_unseen" in r["flags"].split(","), r
