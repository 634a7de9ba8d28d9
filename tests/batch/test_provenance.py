"""Batch metering meters only what a batch produced (SPEC "Version 4 additions").

A file download is read as batch results only when its id came back as a batch's
output_file_id / error_file_id through llmmeter (kept in the ledger's database), or when the
upstream's file object says `purpose: batch_output`. A tenant's own upload shaped like
results is relayed untouched and bills nothing, so it can spend no budget. A real llmmeter
in front of tests/batch/upstream.py, driven with the OpenAI SDK.
"""

from __future__ import annotations

import hashlib
from typing import Any

import httpx
from openai import OpenAI

from tests.batch import lines as wire
from tests.batch.test_sdk import OPENAI_FILE
from tests.batch.upstream import BatchUpstream

KEYS = {"team-a": "sk-llmmeter-team-a", "team-b": "sk-llmmeter-team-b"}
TENANTS = "".join(f'[[tenant]]\nname = "{name}"\nkey_sha256 = ["{hashlib.sha256(key.encode()).hexdigest()}"]\n\n'
                  for name, key in KEYS.items())
# One budget over the whole proxy: what a forged file spent, it spent for every tenant.
PROXY_BUDGET = '[[budget]]\nname = "proxy"\nlimit_usd = "10"\nperiod = "month"\nmode = "enforce"\n'
CHAT = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}


def client(proxy: Any, tenant: str) -> OpenAI:
    return OpenAI(base_url=proxy.base_url, api_key=KEYS[tenant], max_retries=0)


def forged() -> bytes:
    """40 result-shaped lines a tenant wrote itself: 40 x 50M + 50M tokens of gpt-test ($7,500 at batch prices)."""
    return wire.jsonl([wire.openai_chat(f"forged-{i}", prompt=50_000_000, completion=50_000_000) for i in range(40)])


def test_a_forged_results_file_is_relayed_untouched_and_bills_nothing(batch_upstream: BatchUpstream,
                                                                       meter_for: Any) -> None:
    proxy = meter_for(batch_upstream.url, extra=TENANTS + PROXY_BUDGET)
    b = client(proxy, "team-b")
    uploaded = b.files.create(file=("results.jsonl", forged()), purpose="batch")
    assert batch_upstream.purposes[uploaded.id] == "batch"
    assert b.files.content(uploaded.id).content == forged()  # relayed byte for byte

    rows = proxy.rows(expect=2)  # the upload and the download, nothing else
    assert [(r["tenant"], r["endpoint"], r["code"]) for r in rows] == [("team-b", "other", 200)] * 2
    assert all(r["cost_units"] in (None, 0) for r in rows)
    assert proxy.metric("llmmeter_tokens_total", tier="batch") == 0
    # The proxy-wide budget is untouched: another tenant's metered request is still admitted.
    res = httpx.post(proxy.base_url + "/chat/completions", json=CHAT,
                     headers={"authorization": f"Bearer {KEYS['team-a']}"}, timeout=10)
    assert res.status_code != 429, res.text


def test_a_batch_seen_through_llmmeter_is_metered_to_its_tenant_after_a_restart(
        batch_upstream: BatchUpstream, meter_for: Any, ledger_db: str | None) -> None:
    batch_upstream.file_objects = False  # no file object to ask: only what llmmeter saw makes it results
    proxy = meter_for(batch_upstream.url, extra=TENANTS, db=ledger_db)
    a = client(proxy, "team-a")
    requests = a.files.create(file=("input.jsonl", b'{"custom_id": "request-1"}\n'), purpose="batch")
    created = a.batches.create(input_file_id=requests.id, endpoint="/v1/chat/completions", completion_window="24h")
    batch_upstream.files["file-" + created.id] = OPENAI_FILE
    done = a.batches.retrieve(created.id)
    assert done.output_file_id == "file-batch_new"

    proxy.stop()  # what was seen is in the ledger's database, not in the process
    proxy.start()
    # Another tenant downloads it: the results are team-a's batch, billed to team-a.
    assert client(proxy, "team-b").files.content(done.output_file_id).content == OPENAI_FILE
    rows = proxy.rows(expect=6)
    results = [r for r in rows if r["endpoint"] == "batch"]
    assert sorted(r["upstream_request_id"] for r in results) == ["request-1", "request-3"]
    assert {(r["tenant"], r["tier"]) for r in results} == {("team-a", "batch")}
    assert all(r["cost_units"] > 0 for r in results)
    assert not [r for r in batch_upstream.requests if r["path"] == "/v1/files/file-batch_new"]


def test_an_unseen_file_is_metered_when_the_upstream_says_batch_output(batch_upstream: BatchUpstream,
                                                                        meter_for: Any) -> None:
    batch_upstream.files["file-elsewhere"] = OPENAI_FILE  # a batch made past llmmeter: purpose batch_output
    proxy = meter_for(batch_upstream.url, extra=TENANTS)
    assert client(proxy, "team-b").files.content("file-elsewhere").content == OPENAI_FILE
    results = [r for r in proxy.rows(expect=3) if r["endpoint"] == "batch"]
    assert len(results) == 2 and {r["tenant"] for r in results} == {"team-b"}
    # It cost one more upstream request: the file object, asked before the content.
    paths = [r["path"] for r in batch_upstream.requests]
    assert paths == ["/v1/files/file-elsewhere", "/v1/files/file-elsewhere/content"]
