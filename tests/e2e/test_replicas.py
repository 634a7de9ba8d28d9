"""Two llmmeter replicas behind one PostgreSQL ledger, under concurrent load from real clients:
every response a client saw is recorded exactly once, and the month's report adds up."""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from openai import OpenAI

from tests.e2e.test_metering import expected_cost, units
from tests.fake_upstream import FakeUpstream

REQUESTS = 240
THREADS = 12
TENANTS = ("alpha", "beta", "gamma")


def call(client: OpenAI, i: int) -> tuple[str, str, int, int, int]:
    """One chat call, streamed for every third; returns what the client saw:
    (request id, tenant, uncached input, cached input, output tokens)."""
    rng = random.Random(i)
    prompt, completion = rng.randrange(10, 50_000), rng.randrange(1, 5_000)
    cached = rng.choice((0, prompt // 2))
    tenant = TENANTS[i % len(TENANTS)]
    headers = {"x-llmmeter-tenant": tenant,
               "x-fake-usage": json.dumps({"prompt": prompt, "cached": cached, "completion": completion}),
               "x-fake-delay-ms": str(rng.choice((0, 2, 10)))}
    messages = [{"role": "user", "content": f"call {i}"}]
    if i % 3 == 0:
        with client.chat.completions.create(model="kimi-k3.1-pro", messages=messages, stream=True,
                                            extra_headers=headers) as stream:
            chunks = list(stream)
            request_id = stream.response.headers["x-request-id"]
        assert chunks and all(c.id == chunks[0].id for c in chunks)
        body_id = chunks[0].id
    else:
        raw = client.chat.completions.with_raw_response.create(model="kimi-k3.1-pro", messages=messages,
                                                               extra_headers=headers)
        reply = raw.parse()
        assert reply.usage is not None and reply.usage.completion_tokens == completion
        request_id, body_id = raw.headers["x-request-id"], reply.id
    assert body_id == "chatcmpl-" + request_id.removeprefix("req_")
    return request_id, tenant, prompt - cached, cached, completion


def test_two_replicas_record_every_request_once_and_the_report_adds_up(
        fake: FakeUpstream, serve: Any, pg_url: str) -> None:
    replicas = [serve(upstream=fake.base_url, db=pg_url) for _ in range(2)]
    # A round-robin load balancer, as the client sees it: every other call to each replica.
    clients = [OpenAI(base_url=p.base_url, api_key="k", max_retries=0) for p in replicas]
    with ThreadPoolExecutor(THREADS) as pool:
        seen = list(pool.map(lambda i: call(clients[i % 2], i), range(REQUESTS)))

    rows = replicas[0].rows(expect=REQUESTS, timeout=30)
    assert len(rows) == REQUESTS
    assert len({r["id"] for r in rows}) == REQUESTS
    by_request = {r["upstream_request_id"]: r for r in rows}
    assert len(by_request) == REQUESTS  # no request recorded twice under two ids
    assert set(by_request) == {rid for rid, *_ in seen}
    total = Decimal(0)
    for rid, tenant, inp, cached, out in seen:
        row = by_request[rid]
        usd = expected_cost("kimi-k3.1-pro", "standard", inp, out, cached, 0)
        total += usd
        assert (row["tenant"], row["input_tokens"], row["cache_read_tokens"], row["output_tokens"]) == (
            tenant, inp, cached, out)
        assert row["cost_units"] == units(usd) and row["outcome"] == "ok" and row["code"] == 200
    assert sum(1 for r in rows if r["stream"]) == len(range(0, REQUESTS, 3))
    # Each replica served its half, and says so on its own /metrics (Prometheus scrapes both).
    for proxy in replicas:
        assert proxy.metric("llmmeter_requests_total", outcome="ok") == REQUESTS // 2

    month = datetime.now(UTC).strftime("%Y-%m")
    done = replicas[1].cli("report", "--month", month, "--format", "json", "--db", pg_url)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["totals"]["requests"] == REQUESTS
    assert Decimal(report["totals"]["cost_usd"]) == total
    assert report["totals"]["output_tokens"] == sum(out for *_, out in seen)
    assert report["totals"]["cache_read_tokens"] == sum(cached for *_, cached, _ in seen)
    for row in report["by_tenant"]:
        assert Decimal(row["cost_usd"]) == sum(
            expected_cost("kimi-k3.1-pro", "standard", inp, out, cached, 0)
            for _, t, inp, cached, out in seen if t == row["tenant"])

    exported = replicas[0].cli("export", "--from", "2020-01-01", "--to", "2100-01-01", "--format", "jsonl",
                               "--db", pg_url)
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert [x["id"] for x in lines] == [r["id"] for r in rows]
    assert sum(Decimal(x["cost_usd"]) for x in lines) == total
