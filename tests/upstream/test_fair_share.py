"""One tenant cannot hold every connection to an upstream (SPEC "Version 4 additions":
server.max_connections_per_tenant): past its share its requests wait in order, while
another tenant's go on."""

from __future__ import annotations

import hashlib
import threading
from typing import Any

import httpx

from tests.fake_upstream import FakeUpstream
from tests.faults.helpers import wait_until

CHAT = {"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": "hi"}]}
METRICS = {"authorization": "Bearer mt"}


def config(fake: FakeUpstream, server: str = "") -> str:
    keys = {name: hashlib.sha256(f"key-{name}".encode()).hexdigest() for name in ("a", "b")}
    return (f'[server]\nconnect_timeout_s = 5\nmetrics_token = "mt"\n{server}'
            f'[[upstream]]\nname = "fake"\nbase_url = "{fake.base_url}"\nmax_connections = 4\n'
            + "".join(f'[[tenant]]\nname = "{n}"\nkey_sha256 = ["{k}"]\n' for n, k in keys.items()))


def waiting(proxy: Any) -> float:
    text = httpx.get(proxy.url + "/metrics", headers=METRICS, timeout=5).text
    for line in text.splitlines():
        if line.startswith('llmmeter_upstream_pool_waiting{upstream="fake"}'):
            return float(line.split()[-1])
    return -1.0


def test_a_tenant_past_its_share_waits_and_another_tenant_goes_on(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(config=config(fake))  # max_connections 4: a share of 2 each, by default
    statuses: list[int] = []

    def hung_request() -> None:
        r = httpx.post(proxy.base_url + "/chat/completions", json=CHAT, timeout=30,
                       headers={"authorization": "Bearer key-a", "x-fake-hang": "1"})
        statuses.append(r.status_code)

    threads = [threading.Thread(target=hung_request) for _ in range(4)]
    for t in threads:
        t.start()
    # Two of tenant a's requests reach the upstream; the other two wait for tenant a's share.
    assert wait_until(lambda: fake.in_flight == 2 and waiting(proxy) == 2), (fake.in_flight, waiting(proxy))
    r = httpx.post(proxy.base_url + "/chat/completions", json=CHAT, timeout=30,
                   headers={"authorization": "Bearer key-b"})
    assert r.status_code == 200  # tenant b is not behind tenant a's queue
    fake.release()
    for t in threads:
        t.join(30)
    assert statuses == [200] * 4  # tenant a's waiting requests went on, in order, as slots came free
    assert waiting(proxy) == 0


def test_a_tenant_waiting_past_connect_timeout_gets_503(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(config=config(fake, "max_connections_per_tenant = 1\n").replace(
        "connect_timeout_s = 5", "connect_timeout_s = 1"))
    held = threading.Thread(target=lambda: httpx.post(
        proxy.base_url + "/chat/completions", json=CHAT, timeout=30,
        headers={"authorization": "Bearer key-a", "x-fake-hang": "1"}))
    held.start()
    assert wait_until(lambda: fake.in_flight == 1)
    r = httpx.post(proxy.base_url + "/chat/completions", json=CHAT, timeout=30,
                   headers={"authorization": "Bearer key-a"})
    assert r.status_code == 503 and r.json()["error"]["code"] == "upstream_timeout"
    assert "key-a" not in r.text
    fake.release()
    held.join(30)
    rows = proxy.rows(expect=2)
    assert sorted((row["tenant"], row["outcome"]) for row in rows) == [("a", "ok"), ("a", "upstream_timeout")]
