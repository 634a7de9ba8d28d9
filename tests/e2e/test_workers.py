"""`serve --workers 2`: requests spread over two worker processes, /metrics counts them all.

The official openai SDK sends requests on fresh connections until both workers have served
some (each worker's metric files are named by its pid); then every scrape, whichever
worker answers it, must show exactly the requests, tokens and dollars sent, and the ledger
must hold one row per request.
"""

from __future__ import annotations

import concurrent.futures
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import openai
from openai import OpenAI
from prometheus_client.mmap_dict import MmapedDict

from tests.fake_upstream import FakeUpstream

USAGE = {"prompt": 1200, "cached": 1000, "completion": 50}  # Moonshot shape: 200 input + 1000 cache_read
# kimi-k3.1-pro standard: input 2.00, cache_read 0.20, output 10.00 USD per million tokens.
COST = (200 * Decimal("2.00") + 1000 * Decimal("0.20") + 50 * Decimal("10.00")) / 10**6


def _requests_by_pid(metrics_dir: Path) -> dict[str, float]:
    """llmmeter_requests_total as each worker's own file holds it."""
    out: dict[str, float] = {}
    for f in metrics_dir.glob("counter_*.db"):
        total = 0.0
        for key, value, _, _ in MmapedDict.read_all_values_from_file(str(f)):
            if json.loads(key)[1] == "llmmeter_requests_total":
                total += value
        out[f.stem.split("_", 1)[1]] = total
    return out


def _one(base_url: str) -> None:
    # A client per call: a new connection each time, so the kernel may hand it to either worker.
    with OpenAI(base_url=base_url, api_key="k", max_retries=0) as client:
        client.chat.completions.create(model="kimi-k3.1-pro", messages=[{"role": "user", "content": "hi"}],
                                       extra_headers={"x-fake-usage": json.dumps(USAGE)})


def test_two_workers_count_every_request_once(fake: FakeUpstream, serve: Any, tmp_path: Path) -> None:
    metrics_dir = tmp_path / "prom"
    metrics_dir.mkdir()
    proxy = serve(upstream=fake.base_url, args=("--workers", "2"),
                  env={"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)})
    sent = 0
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        while sent < 400:
            try:
                list(pool.map(lambda _: _one(proxy.base_url), range(40)))
            except openai.APIConnectionError as e:  # the servers' own account says why
                raise AssertionError(f"{e!r} ({e.__cause__!r}); llmmeter's log:\n{proxy.output()}") from e
            sent += 40
            served = [pid for pid, n in _requests_by_pid(metrics_dir).items() if n > 0]
            if len(served) >= 2:
                break
    assert len(served) >= 2, f"all {sent} requests went to one worker: {_requests_by_pid(metrics_dir)}"
    assert sum(_requests_by_pid(metrics_dir).values()) == sent

    for _ in range(6):  # several scrapes, on new connections: any worker may answer
        assert proxy.metric("llmmeter_requests_total", outcome="ok", model="kimi-k3.1-pro") == sent
        assert proxy.metric("llmmeter_tokens_total", type="input") == 200 * sent
        assert proxy.metric("llmmeter_tokens_total", type="cache_read") == 1000 * sent
        assert proxy.metric("llmmeter_tokens_total", type="output") == 50 * sent
        cost = Decimal(str(proxy.metric("llmmeter_cost_usd_total")))
        assert abs(cost - COST * sent) < Decimal("1e-9")
        assert proxy.metric("llmmeter_request_duration_seconds_count") == sent
        # Gauges every worker sets are shown once, without a pid label.
        assert proxy.metric("llmmeter_selfhost_node_tokens_per_second", phase="decode") > 0
        assert not any("pid" in dict(labels) for _, labels in proxy.metrics())

    rows = proxy.rows(expect=sent)
    assert len(rows) == sent and {r["outcome"] for r in rows} == {"ok"}
    assert sum(r["cost_units"] for r in rows) == int(COST * sent * 10**10)
