"""The budget guarantee as a property (SPEC "Budgets (enforced)", issue 32): for any mix of calls,
a period's billed cost is at most the limit plus the flagged overrun.

Hypothesis draws the calls: priced models, an alias a price entry matches, names no table prices
(a deployment name, a router alias, no `model` at all) answered by the upstream with a priced
model or an unpriced one, tiers, streams, `n`, `max_tokens` or none, usage within the request's
bound or beyond it (a misbehaving upstream), no usage at all (estimated), clients that leave
mid-stream before the usage (the provider bills what it generated all the same); sent at once
to two real `llmmeter serve` replicas on one PostgreSQL ledger, one of
them with its wall clock two minutes behind. Each example has a budget of its own (its tag), so
the replicas run once for every example. From the ledger and /metrics, per example:

- billed <= limit + sum of (cost - reserved) over the records flagged `over_reservation`, where
  billed is what the provider bills: a record's cost, or, when llmmeter never saw its usage, the
  most the provider may have billed (its reservation), which the record then counts;
- every admitted request holds a reservation and its leases, whatever its model is called, and
  is flagged exactly when it cost more than that;
- a refused call never reached the upstream;
- the overrun counters of the replicas add up to the flagged overrun.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.budget.burst import query, wait_for
from tests.budget.skew import skewed_env
from tests.conftest import DATA
from tests.fake_upstream import FakeUpstream
from tests.serve import Served

pytestmark = pytest.mark.timeout(900)
EXAMPLES = 12
LIMIT = Decimal("0.004")
LIMIT_UNITS = int(LIMIT * 10**10)
MODEL_MAX_OUTPUT = 200  # [[model_limit]] for calls that set no max_tokens
# (requested model, what the upstream answers with: None = the same name)
MODELS = (("gpt-test", None), ("gpt-test-2026", None), ("llama-test", None), ("llama-test", "gpt-test"),
          ("my-azure-deployment", "gpt-test"), ("router/alias", "llama-test"), (None, "gpt-test"),
          ("my-azure-deployment", "unpriced-answer"))


@dataclass(frozen=True, slots=True)
class Call:
    model: tuple[str | None, str | None]
    tier: str | None
    stream: bool
    n: int
    max_tokens: int | None
    completion: int  # output the upstream reports, of the most the request asked for
    overbill: bool  # the upstream reports 500 more than that
    no_usage: bool
    leave: bool  # a streamed call the client leaves after the first event
    replica: int


calls = st.builds(Call, model=st.sampled_from(MODELS), tier=st.sampled_from([None, "highspeed"]),
                  stream=st.booleans(), n=st.integers(1, 3), max_tokens=st.none() | st.integers(1, 300),
                  completion=st.integers(0, 100), overbill=st.booleans(), no_usage=st.booleans(),
                  leave=st.booleans(), replica=st.integers(0, 1))


@pytest.fixture
def prices_dir(tmp_path: Path) -> Path:
    """The test models only: the dearest rates (gpt-test highspeed, $3.75 input-side, $12 output a
    million) bound the calls to names with no price, so a small budget admits some of them."""
    d = tmp_path / "prices"
    d.mkdir()
    shutil.copy(DATA / "prices" / "test-models.toml", d)
    return d


def config(tags: int) -> str:
    budgets = "".join(f'[[budget]]\nname = "p{i}"\ntag = "p{i}"\nlimit_usd = "{LIMIT}"\nmode = "enforce"\n'
                      "allow_unpriced = true\nalert_at_pct = [100]\n\n" for i in range(tags))
    return f'{budgets}[[model_limit]]\nmatch = ["*"]\nmax_output = {MODEL_MAX_OUTPUT}\n'


def request(c: Call, tag: str, i: int) -> tuple[dict[str, Any], dict[str, str]]:
    requested, answered = c.model
    body: dict[str, Any] = {"messages": [{"role": "user", "content": f"{tag} call {i:02d}"}], "n": c.n,
                            "stream": c.stream}
    if requested is not None:
        body["model"] = requested
    if c.tier is not None:
        body["service_tier"] = c.tier
    if c.max_tokens is not None:
        body["max_tokens"] = c.max_tokens
    most = (c.max_tokens or MODEL_MAX_OUTPUT) * c.n
    # An upstream reporting beyond the bound is seen only when its usage is: one that bills beyond
    # max_tokens and never says so is beyond any bound (docs/budgets.md, "The guarantee").
    unseen = c.no_usage or (c.stream and c.leave)
    completion = most * c.completion // 100 + (500 if c.overbill and not unseen else 0)
    headers = {"x-llmmeter-tag": tag, "x-fake-model": answered or requested or "unknown",
               "x-fake-usage": json.dumps({"prompt": 10, "completion": completion})}
    if c.no_usage:
        headers["x-fake-no-usage"] = "1"
    if c.leave:
        headers["x-fake-delay-ms"] = "50"
    return body, headers


async def send(replicas: Sequence[Served], tag: str, plan: Sequence[Call]) -> list[int]:
    async def one(client: httpx.AsyncClient, c: Call, i: int) -> int:
        body, headers = request(c, tag, i)
        if not c.stream:
            return (await client.post("/chat/completions", json=body, headers=headers)).status_code
        async with client.stream("POST", "/chat/completions", json=body, headers=headers) as r:
            async for _ in r.aiter_bytes():
                if c.leave:
                    break  # the client leaves: the proxy records client_closed
            return r.status_code

    clients = [httpx.AsyncClient(base_url=s.base_url, timeout=60) for s in replicas]
    try:
        return list(await asyncio.gather(*(one(clients[c.replica], c, i) for i, c in enumerate(plan))))
    finally:
        for client in clients:
            await client.aclose()


def test_billed_never_exceeds_the_limit_plus_the_flagged_overrun(fake: FakeUpstream, serve: Any,
                                                                 pg_url: str) -> None:
    tags = EXAMPLES + 8  # an explicit example and Hypothesis's own retries take a budget each too
    cfg = config(tags)
    replicas = [serve(upstream=fake.base_url, config=cfg, db=pg_url, env=skewed_env(-120)),
                serve(upstream=fake.base_url, config=cfg, db=pg_url)]
    fresh = (f"p{i}" for i in itertools.count())

    @settings(max_examples=EXAMPLES, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(plan=st.lists(calls, min_size=3, max_size=14))
    def example(plan: list[Call]) -> None:
        tag = next(fresh)
        assert int(tag[1:]) < tags, "more examples than budgets: raise `tags`"
        statuses = asyncio.run(send(replicas, tag, plan))
        assert set(statuses) <= {200, 429}, statuses
        rows: list[dict[str, Any]] = []

        def recorded() -> bool:
            rows[:] = query(replicas[1], "SELECT * FROM requests WHERE tag = ?", (tag,))
            return len(rows) >= len(plan)

        wait_for(recorded, 30, f"{len(plan)} records of {tag}")
        assert len(rows) == len(plan)
        billed = overrun = 0
        for r in rows:
            flags = (r["flags"] or "").split(",")
            if r["outcome"] == "rejected":
                assert r["code"] == 429 and r["budget"] == tag, r
                continue
            assert r["reserved_units"] is not None and r["budget_leases"], r
            # What the provider bills: the ledger's cost when llmmeter saw the usage. When it did not
            # (a client that left, an upstream that reported none), the provider billed the usage
            # the fake would have reported, which the plan keeps within the request's bound: the
            # reservation is what it may have billed.
            unseen = r["usage_source"] == "estimated"
            if unseen and r["cost_units"] is not None:
                # At least its reservation: raised to it (usage_unseen), or an estimate above it (over_reservation).
                billed += max(r["reserved_units"], r["cost_units"])
                assert r["cost_units"] >= r["reserved_units"], r
                assert ("usage_unseen" in flags) == (r["cost_units"] == r["reserved_units"] != 0) or \
                    "over_reservation" in flags, r
            else:
                billed += r["cost_units"] or 0
            over = r["cost_units"] is not None and r["cost_units"] > r["reserved_units"]
            assert ("over_reservation" in flags) == over, r
            if over:
                overrun += r["cost_units"] - r["reserved_units"]
        assert billed <= LIMIT_UNITS + overrun, (
            f"{tag}: billed {billed / 1e10} USD > limit {LIMIT} + flagged overrun {overrun / 1e10}")
        refused = {i for i, s in enumerate(statuses) if s == 429}
        reached = {int(r["body"].split(b" call ")[1][:2]) for r in list(fake.requests) if f"{tag} call ".encode()
                   in r["body"]}
        assert not refused & reached, "a refused call reached the upstream"

        def counted() -> bool:
            total = sum(s.metric("llmmeter_budget_overrun_usd_total", budget=tag) for s in replicas)
            return abs(total - overrun / 1e10) < 1e-9

        wait_for(counted, 20, f"{tag}: the replicas' overrun counters add up to {overrun / 1e10} USD")

    example()
