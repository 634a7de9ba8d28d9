"""A batch's results are the cost of the tenant that created it, whoever sees or downloads them.

On an upstream account every tenant shares, any tenant's listing (GET /v1/batches, as SDK
polling does) shows every tenant's batches, and any tenant may download any output. Neither
may move a batch's cost: a real llmmeter with two tenants, each with a key and an enforced
budget, in front of tests/batch/upstream.py, driven with the official SDKs.
"""

from __future__ import annotations

import hashlib
from typing import Any

import httpx
from anthropic import Anthropic
from openai import OpenAI

from tests.batch import lines as wire
from tests.batch.upstream import BatchUpstream

KEYS = {"team-a": "sk-llmmeter-team-a", "team-b": "sk-llmmeter-team-b"}
TENANTS = "".join(f'[[tenant]]\nname = "{name}"\nkey_sha256 = ["{hashlib.sha256(key.encode()).hexdigest()}"]\n\n'
                  for name, key in KEYS.items())
# Each tenant may spend 10 USD a month; the batch below costs more than that.
BUDGETS = "".join(f'[[budget]]\nname = "{name}-month"\ntenant = "{name}"\nlimit_usd = "10"\nperiod = "month"\n'
                  f'mode = "enforce"\n\n' for name in KEYS)
# 4 x (1M input + 1M output) of gpt-test at batch prices: 4 x 3.75 = 15 USD, in this month's
# budget period (no creation time: the download's is used).
OPENAI_RESULTS = wire.jsonl([wire.openai_chat(f"req-{i}", prompt=1_000_000, completion=1_000_000, created=None)
                             for i in range(4)])
# 2 x (1M input + 1M output) of claude-batch-test at batch prices: 2 x 9 = 18 USD.
ANTHROPIC_RESULTS = wire.jsonl([wire.anthropic_succeeded(f"req-{i}", inp=1_000_000, out=1_000_000,
                                                         model="claude-batch-test") for i in range(2)])
CHAT = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}


def openai(proxy: Any, tenant: str) -> OpenAI:
    return OpenAI(base_url=proxy.base_url, api_key=KEYS[tenant], max_retries=0)


def anthropic(proxy: Any, tenant: str) -> Anthropic:
    return Anthropic(base_url=proxy.url, api_key=KEYS[tenant], max_retries=0)


def admitted(proxy: Any, tenant: str) -> bool:
    """Whether the tenant's next ordinary metered request passes its budget."""
    res = httpx.post(proxy.base_url + "/chat/completions", json=CHAT,
                     headers={"authorization": f"Bearer {KEYS[tenant]}"}, timeout=10)
    return res.status_code != 429


def batch_records(proxy: Any, expect: int) -> list[tuple[str, str, int]]:
    rows = [r for r in proxy.rows(expect=expect) if r["endpoint"] == "batch"]
    return sorted((r["tenant"], r["upstream_request_id"], r["cost_units"]) for r in rows)


def test_another_tenants_listing_does_not_make_an_openai_batch_its_cost(batch_upstream: BatchUpstream,
                                                                        meter_for: Any, ledger_db: str | None) -> None:
    proxy = meter_for(batch_upstream.url, extra=TENANTS + BUDGETS, db=ledger_db)
    a, b = openai(proxy, "team-a"), openai(proxy, "team-b")
    requests = a.files.create(file=("input.jsonl", b'{"custom_id": "req-0"}\n'), purpose="batch")
    created = a.batches.create(input_file_id=requests.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert created.output_file_id is None  # the creation answer names no output file
    batch_upstream.files["file-" + created.id] = OPENAI_RESULTS

    # team-b lists the account's batches, as its SDK's polling does: it sees team-a's output file first.
    assert [(x.id, x.output_file_id) for x in b.batches.list()] == [(created.id, "file-batch_new")]
    assert a.files.content("file-batch_new").content == OPENAI_RESULTS
    assert b.files.content("file-batch_new").content == OPENAI_RESULTS  # a second download, by another

    # upload, create, list, two downloads: 5 records, and the 4 results once, all team-a's.
    results = batch_records(proxy, expect=9)
    assert [(tenant, rid) for tenant, rid, _ in results] == [("team-a", f"req-{i}") for i in range(4)]
    assert sum(cost for _, _, cost in results) == 15 * 10**10
    assert admitted(proxy, "team-b")  # team-b's budget is untouched
    assert not admitted(proxy, "team-a")  # team-a's own batch spent team-a's


def test_a_second_download_by_another_tenant_does_not_move_a_message_batchs_cost(
        batch_upstream: BatchUpstream, meter_for: Any, ledger_db: str | None) -> None:
    proxy = meter_for(batch_upstream.url, extra=TENANTS + BUDGETS, db=ledger_db)
    a, b = anthropic(proxy, "team-a"), anthropic(proxy, "team-b")
    created = a.messages.batches.create(requests=[{"custom_id": "req-0", "params": {
        "model": "claude-batch-test", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}}])
    batch_upstream.results[created.id] = ANTHROPIC_RESULTS

    # team-b lists the account's batches and downloads team-a's results before team-a does.
    assert [x.id for x in b.messages.batches.list()] == [created.id]
    assert [r.custom_id for r in b.messages.batches.results(created.id)] == ["req-0", "req-1"]
    assert [r.custom_id for r in a.messages.batches.results(created.id)] == ["req-0", "req-1"]

    # create, list, two (retrieve + results) downloads: 6 records, and the 2 results once, team-a's.
    results = batch_records(proxy, expect=8)
    assert [(tenant, rid) for tenant, rid, _ in results] == [("team-a", "req-0"), ("team-a", "req-1")]
    assert sum(cost for _, _, cost in results) == 18 * 10**10
    assert admitted(proxy, "team-b")
    assert not admitted(proxy, "team-a")


def test_a_batch_llmmeter_did_not_see_created_is_the_downloaders(batch_upstream: BatchUpstream,
                                                                 meter_for: Any) -> None:
    batch_upstream.batches.append("batch_elsewhere")  # made past llmmeter: no owner here
    batch_upstream.files["file-batch_elsewhere"] = OPENAI_RESULTS
    proxy = meter_for(batch_upstream.url, extra=TENANTS + BUDGETS)
    a, b = openai(proxy, "team-a"), openai(proxy, "team-b")
    assert [x.output_file_id for x in b.batches.list()] == ["file-batch_elsewhere"]
    assert a.files.content("file-batch_elsewhere").content == OPENAI_RESULTS  # team-a chose to download it
    assert b.files.content("file-batch_elsewhere").content == OPENAI_RESULTS

    results = batch_records(proxy, expect=7)
    assert [(tenant, rid) for tenant, rid, _ in results] == [("team-a", f"req-{i}") for i in range(4)]
    assert admitted(proxy, "team-b") and not admitted(proxy, "team-a")
    # A listing through llmmeter named it as a batch's output: no file object was asked for.
    assert not [r for r in batch_upstream.requests if r["path"] == "/v1/files/file-batch_elsewhere"]
