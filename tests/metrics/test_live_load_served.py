"""A running llmmeter's live load counters on /metrics equal the load of the requests its ledger
holds, each request's load summed millisecond by millisecond here (with one worker and with two,
whose counters /metrics sums)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from typing import Any

import httpx
import pytest

from tests.fake_upstream import FakeUpstream
from tests.ledger.helpers import wait_until
from tests.metrics.test_live_load import LIVE, by_millisecond


def _send(base_url: str, stream: bool, delay_ms: int) -> None:
    body = {"model": "kimi-k3.1-pro", "stream": stream,
            "messages": [{"role": "user", "content": "how many tokens are in flight " * 40}]}
    with httpx.stream("POST", base_url + "/chat/completions", json=body, timeout=30,
                      headers={"x-fake-delay-ms": str(delay_ms)}) as r:
        assert r.status_code == 200
        r.read()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_live_load_on_metrics_matches_the_ledger(fake: FakeUpstream, serve: Any, workers: str) -> None:
    proxy = serve(upstream=fake.base_url, args=("--workers", workers))
    for stream, delay_ms in ((True, 15), (True, 5), (False, 30)):
        _send(proxy.base_url, stream, delay_ms)
    rows = proxy.rows(expect=3)
    assert len(rows) == 3
    want = [Fraction(0)] * 4
    for r in rows:
        d = r["duration_ms"]
        first = min(r["ttft_ms"] if r["stream"] and r["ttft_ms"] is not None else 1000, d)
        inp = r["input_tokens"] + r["cache_read_tokens"] + r["cache_write_tokens"] + r["cache_write_1h_tokens"]
        assert inp > 0 and r["output_tokens"] > 0
        want = [w + x for w, x in zip(want, by_millisecond(d, first, inp, r["output_tokens"]), strict=True)]

    def scraped() -> list[float]:
        return [proxy.metric(name, model="kimi-k3.1-pro") for name in LIVE]

    assert wait_until(lambda: scraped()[1] == float(want[1])), (scraped(), want)
    for _ in range(4):  # new connections: with two workers either may answer, each with the sum
        for got, w in zip(scraped(), want, strict=True):
            assert abs(Fraction(got) - w) <= w * Fraction(1, 10**9), (got, w)
    assert proxy.metric("llmmeter_selfhost_node_capacity", node="8xB300-vllm-dcp8", limit="kv_cache") == 18_500_000


@pytest.mark.parametrize("workers", ["1", "2"])
def test_requests_in_flight_counts_the_requests_under_way(fake: FakeUpstream, serve: Any, workers: str) -> None:
    proxy = serve(upstream=fake.base_url, args=("--workers", workers))
    assert proxy.metric("llmmeter_requests_in_flight") == 0
    with ThreadPoolExecutor(3) as pool:
        held = [pool.submit(httpx.post, proxy.base_url + "/chat/completions", timeout=60,
                            headers={"x-fake-hang": "1"}, json={"model": "kimi-k3.1-pro", "messages": []})
                for _ in range(3)]
        assert wait_until(lambda: fake.parked == 3)
        for _ in range(4):  # with two workers, either answers with both workers' sum
            assert proxy.metric("llmmeter_requests_in_flight") == 3
        fake.release()
        assert all(f.result().status_code == 200 for f in held)
    assert wait_until(lambda: proxy.metric("llmmeter_requests_in_flight") == 0)
    assert proxy.metric("llmmeter_in_flight_seconds_total", model="kimi-k3.1-pro") > 0
