"""A budget with `allow_unpriced = true` caps the requests it admits whatever the model is called
(issue 32, item 1): a deployment name, a routing alias or no `model` at all, answered by the
upstream with a priced model, is reserved before it is forwarded, and what it bills beyond its
reservation is flagged `over_reservation` and counted in `llmmeter_budget_overrun_usd_total`.
Real `llmmeter serve` processes, the fake upstream as the provider, the ledger read back."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.budget.burst import settled_rows, wait_for
from tests.conftest import DATA
from tests.fake_upstream import FakeUpstream

pytestmark = pytest.mark.timeout(180)
LIMIT_UNITS = 100_000_000  # $0.01
CALLS = 40
# Names no price table knows; the upstream answers each with the priced gpt-test.
UNKNOWN = ("my-azure-deployment", "router/fast-alias", None)


@pytest.fixture
def prices_dir(tmp_path: Path) -> Path:
    """Only the test models: the dearest rates any entry carries are gpt-test's highspeed tier
    ($3.75 a million input-side tokens, $12 output), so a small budget admits some calls."""
    d = tmp_path / "prices"
    d.mkdir()
    shutil.copy(DATA / "prices" / "test-models.toml", d)
    return d


def config(tag: str) -> str:
    return (f'[[budget]]\nname = "{tag}"\ntag = "{tag}"\nlimit_usd = "0.01"\nmode = "enforce"\n'
            "allow_unpriced = true\nalert_at_pct = [50]\n")


def call(i: int, completion: int, tag: str) -> tuple[dict[str, Any], dict[str, str]]:
    body: dict[str, Any] = {"max_tokens": 100, "messages": [{"role": "user", "content": f"call {i:03d}"}]}
    model = UNKNOWN[i % len(UNKNOWN)]
    if model is not None:
        body["model"] = model
    headers = {"x-fake-model": "gpt-test", "x-llmmeter-tag": tag,
               "x-fake-usage": json.dumps({"prompt": 40, "completion": completion})}
    return body, headers


async def send(base_url: str, calls: list[tuple[dict[str, Any], dict[str, str]]]) -> list[int]:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        replies = await asyncio.gather(*(client.post("/chat/completions", json=b, headers=h) for b, h in calls))
    return [r.status_code for r in replies]


def check(rows: list[dict[str, Any]]) -> tuple[int, int, int]:
    """(billed, flagged overrun, admitted) of the rows; each admitted row holds a reservation and is
    flagged exactly when it billed more than it."""
    billed = overrun = admitted = 0
    for r in rows:
        flags = (r["flags"] or "").split(",")
        billed += r["cost_units"] or 0
        if r["outcome"] == "rejected":
            continue
        admitted += 1
        assert r["reserved_units"] and r["reserved_units"] > 0 and r["budget_leases"], r
        assert r["cost_units"] is not None, r  # answered by a priced model: it is spent
        over = r["cost_units"] > r["reserved_units"]
        assert ("over_reservation" in flags) == over, r
        if over:
            overrun += r["cost_units"] - r["reserved_units"]
    return billed, overrun, admitted


def test_unknown_names_answered_by_a_priced_model_are_reserved_and_capped(fake: FakeUpstream, serve: Any) -> None:
    s = serve(upstream=fake.base_url, config=config("unknown-names"))
    statuses = asyncio.run(send(s.base_url, [call(i, 100, "unknown-names") for i in range(CALLS)]))
    assert set(statuses) <= {200, 429}, statuses
    rows = settled_rows(s, CALLS)
    assert len(rows) == CALLS
    billed, overrun, admitted = check(rows)
    print(f"{admitted} of {CALLS} admitted; billed {billed / 1e10} USD of 0.01, overrun {overrun / 1e10}")
    assert 1 <= admitted < CALLS and statuses.count(200) == admitted
    assert billed <= LIMIT_UNITS + overrun
    assert overrun == 0  # the reservations bounded every answer
    assert s.metric("llmmeter_budget_overrun_usd_total", budget="unknown-names") == 0


def test_what_an_unknown_name_bills_beyond_its_reservation_is_flagged_and_counted(fake: FakeUpstream,
                                                                                 serve: Any) -> None:
    # An upstream that answers with far more output than max_tokens asked for (as a server-side
    # tool or a misbehaving deployment would): the excess is the flagged overrun, to the unit.
    s = serve(upstream=fake.base_url, config=config("overbilled"))
    assert asyncio.run(send(s.base_url, [call(1, 5_000, "overbilled")])) == [200]
    [row] = settled_rows(s, 1)
    billed, overrun, admitted = check([row])
    assert admitted == 1 and overrun > 0 and billed <= LIMIT_UNITS + overrun
    assert "over_reservation" in row["flags"]

    def counted() -> bool:
        return s.metric("llmmeter_budget_overrun_usd_total", budget="overbilled") == pytest.approx(overrun / 1e10)

    wait_for(counted, 20, "the overrun counted")
    # The budget is spent: the next call with an unknown name is refused, never forwarded.
    before = len(fake.requests)
    assert asyncio.run(send(s.base_url, [call(2, 100, "overbilled")])) == [429]
    assert len(fake.requests) == before
