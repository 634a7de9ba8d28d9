"""The official openai and anthropic SDKs download batch results through a running llmmeter
from a real HTTP upstream: each result becomes one record at the batch tier, once however
often it is downloaded; Anthropic's results_url is made to name llmmeter (server.public_url)."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import httpx
import orjson
import psycopg
from anthropic import Anthropic
from openai import OpenAI

from proxy.relay.batch import record_id
from tests.batch import lines as wire
from tests.batch.upstream import BatchUpstream
from tests.faults.helpers import wait_until
from tests.serve import Served

OPENAI_FILE = wire.jsonl([wire.openai_chat("request-1", prompt=1000, completion=200, cached=400),
                          wire.openai_failed("request-2"),
                          wire.openai_chat("request-3", prompt=50, completion=5, service_tier="flex")])
ANTHROPIC_RESULTS = wire.jsonl([
    wire.anthropic_succeeded("my-first-request", inp=10, out=34, model="claude-batch-test"),
    wire.anthropic_errored("my-second-request"),
    wire.anthropic_succeeded("my-third-request", inp=2000, out=100, cache_read=8000, cache_write=500,
                             model="claude-batch-test")])


def units(usd: Decimal) -> int:
    value = usd * 10**10
    assert value == value.to_integral_value()
    return int(value)


def batch_rows(proxy: Served, expect: int) -> list[dict[str, Any]]:
    rows = [r for r in proxy.rows(expect=expect) if r["endpoint"] == "batch"]
    return sorted(rows, key=lambda r: r["upstream_request_id"])


ROLLUP = ("SELECT COALESCE(SUM(requests), 0), COALESCE(SUM(input_tokens), 0), "
          "COALESCE(SUM(cost_usd * 10000000000 + cost_units), 0) FROM hourly_rollup WHERE tier = 'batch'")


def rollup(proxy: Served) -> tuple[int, int, int]:
    """The batch tier's requests, input tokens and cost (units) as the hourly rollup has them."""
    if proxy.db_url.startswith("postgresql://"):
        with psycopg.connect(proxy.db_url) as pg:
            row = pg.execute(ROLLUP).fetchone()
    else:
        con = sqlite3.connect(proxy.db)
        try:
            row = con.execute(ROLLUP).fetchone()
        finally:
            con.close()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


def test_openai_sdk_batch_output_file_metered_at_the_batch_tier(batch_upstream: BatchUpstream,
                                                                 meter_for: Any) -> None:
    batch_upstream.files["file-batch_1"] = OPENAI_FILE
    proxy = meter_for(batch_upstream.url)
    client = OpenAI(base_url=proxy.base_url, api_key="sk-client", max_retries=0)
    batch = client.batches.retrieve("batch_1")
    content = client.files.content(batch.output_file_id or "")
    assert content.content == OPENAI_FILE  # relayed byte for byte

    one, three = batch_rows(proxy, expect=4)
    # The download asked for the body uncompressed, so its lines can be read as they pass.
    [get] = [r for r in batch_upstream.requests if r["path"] == "/v1/files/file-batch_1/content"]
    assert get["headers"]["accept-encoding"] == "identity"
    assert one["id"] == record_id("openai", "file-batch_1", "request-1")
    assert (one["tier"], one["model"], one["upstream"], one["tenant"], one["code"]) == \
        ("batch", "gpt-test", "openai", "default", 200)
    assert (one["input_tokens"], one["cache_read_tokens"], one["output_tokens"]) == (600, 400, 200)
    assert one["start"] == wire.CREATED * 1_000_000  # the body's created, in µs
    # gpt-test batch: input 0.75, cache read 0.075, output 3.00 USD per million.
    assert one["cost_units"] == units((600 * Decimal("0.75") + 400 * Decimal("0.075") + 200 * Decimal(3)) / 10**6)
    assert three["tier"] == "batch" and three["price_tier"] == "batch"  # its own service_tier "flex" aside
    others = [r for r in proxy.rows() if r["endpoint"] == "other"]
    assert len(others) == 2 and {r["code"] for r in others} == {200}  # the downloads: plain records


def test_downloading_twice_bills_once_in_ledger_rollup_and_metrics(batch_upstream: BatchUpstream,
                                                                    meter_for: Any, ledger_db: str | None) -> None:
    batch_upstream.files["file-x"] = OPENAI_FILE
    proxy = meter_for(batch_upstream.url, db=ledger_db)
    client = OpenAI(base_url=proxy.base_url, api_key="sk-client", max_retries=0)
    client.files.content("file-x")
    first = batch_rows(proxy, expect=3)
    assert len(first) == 2
    assert wait_until(lambda: rollup(proxy)[0] == 2)
    totals = rollup(proxy)
    tokens = proxy.metric("llmmeter_tokens_total", tier="batch", type="input")
    assert tokens == 650
    client.files.content("file-x")
    rows = proxy.rows(expect=4)
    assert len(rows) == 4  # one more download record, no more results
    assert batch_rows(proxy, expect=4) == first
    assert rollup(proxy) == totals
    assert proxy.metric("llmmeter_tokens_total", tier="batch", type="input") == tokens


def test_anthropic_sdk_results_through_public_url(batch_upstream: BatchUpstream, meter_for: Any) -> None:
    batch_upstream.results["msgbatch_01"] = ANTHROPIC_RESULTS
    proxy = meter_for(batch_upstream.url)
    client = Anthropic(base_url=proxy.url, api_key="sk-ant-client", max_retries=0)
    batch = client.messages.batches.retrieve("msgbatch_01")
    assert batch.results_url == proxy.url + "/v1/messages/batches/msgbatch_01/results"
    before = datetime.now(UTC)
    results = list(client.messages.batches.results("msgbatch_01"))
    assert [r.custom_id for r in results] == ["my-first-request", "my-second-request", "my-third-request"]
    assert [r.result.type for r in results] == ["succeeded", "errored", "succeeded"]
    # The results went through llmmeter (the SDK fetches results_url as it is given).
    got = [r for r in batch_upstream.requests if r["path"].endswith("/results")]
    assert len(got) == 1 and got[0]["headers"]["accept-encoding"] == "identity"

    first, third = batch_rows(proxy, expect=5)
    assert first["id"] == record_id("openai", "msgbatch_01", "my-first-request")
    assert (first["model"], first["tier"], first["input_tokens"], first["output_tokens"]) == \
        ("claude-batch-test", "batch", 10, 34)
    # A Message names no creation time: the download's, flagged.
    assert "start_from_download" in first["flags"]
    assert first["start"] >= int(before.timestamp() * 1_000_000) - 5_000_000
    # claude-batch-test batch: input 1.50, cache read 0.15, cache write 1.875, output 7.50.
    assert third["cost_units"] == units((2000 * Decimal("1.5") + 8000 * Decimal("0.15") + 500 * Decimal("1.875")
                                         + 100 * Decimal("7.5")) / 10**6)
    assert third["price_tier"] == "batch"


def test_every_batch_object_names_llmmeter_with_its_length_recomputed(batch_upstream: BatchUpstream,
                                                                      meter_for: Any) -> None:
    batch_upstream.results["msgbatch_01"] = ANTHROPIC_RESULTS
    batch_upstream.results["msgbatch_02"] = ANTHROPIC_RESULTS
    proxy = meter_for(batch_upstream.url)
    client = Anthropic(base_url=proxy.url, api_key="sk-ant-client", max_retries=0)
    listed = list(client.messages.batches.list())
    assert [b.results_url for b in listed] == [f"{proxy.url}/v1/messages/batches/msgbatch_0{i}/results"
                                               for i in (1, 2)]
    created = client.messages.batches.create(requests=[{"custom_id": "a", "params": {
        "model": "claude-batch-test", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}}])
    assert created.results_url is None  # in progress: nothing to name
    canceled = client.messages.batches.cancel("msgbatch_02")
    assert canceled.results_url == f"{proxy.url}/v1/messages/batches/msgbatch_02/results"
    r = httpx.get(proxy.url + "/v1/messages/batches/msgbatch_01?beta=true")
    assert r.headers["content-length"] == str(len(r.content))
    expected = batch_upstream.message_batch("msgbatch_01")
    expected["results_url"] = f"{proxy.url}/v1/messages/batches/msgbatch_01/results"
    assert orjson.loads(r.content) == expected  # nothing else changed


def test_without_public_url_results_url_names_a_path_on_llmmeter(batch_upstream: BatchUpstream,
                                                                 meter_for: Any) -> None:
    """Followed as the provider wrote it, results_url would take the tenant's proxy key past
    llmmeter to the provider's host. Without public_url it becomes a path, which the SDK
    resolves against the address it uses: llmmeter's."""
    batch_upstream.results["msgbatch_01"] = ANTHROPIC_RESULTS
    proxy = meter_for(batch_upstream.url, public=False)
    assert "server.public_url is not set" in proxy.output()  # said at start
    raw = httpx.get(proxy.url + "/v1/messages/batches/msgbatch_01")
    assert raw.json()["results_url"] == "/v1/messages/batches/msgbatch_01/results"
    assert raw.headers["content-length"] == str(len(raw.content))
    client = Anthropic(base_url=proxy.url, api_key="sk-ant-client", max_retries=0)
    results = list(client.messages.batches.results("msgbatch_01"))
    assert len(results) == 3
    assert len(batch_rows(proxy, expect=5)) == 2  # the two results with usage, metered on the way
    [get] = [r for r in batch_upstream.requests if r["path"] == "/v1/messages/batches/msgbatch_01/results"]
    assert get["headers"]["accept-encoding"] == "identity"  # it came through llmmeter


def test_a_compressed_file_is_still_metered(batch_upstream: BatchUpstream, meter_for: Any) -> None:
    batch_upstream.files["file-gz"] = OPENAI_FILE
    batch_upstream.gzip = True  # although identity was asked for
    proxy = meter_for(batch_upstream.url, server="max_decompressed_mb = 1")
    r = httpx.get(proxy.base_url + "/files/file-gz/content")
    assert r.headers["content-encoding"] == "gzip" and r.content == OPENAI_FILE
    assert len(batch_rows(proxy, expect=3)) == 2
