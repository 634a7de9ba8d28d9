"""`kill -9` under load loses no record of a response that reached its client in full."""

from __future__ import annotations

import collections
import json
import threading
import time
from pathlib import Path

import httpx

from tests.fake_upstream import FakeUpstream
from tests.serve import Served

BODY = {"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": "hi"}]}


def _client_loop(url: str, stream: bool, done: list[str], stop: threading.Event) -> None:
    headers = {"x-fake-usage": json.dumps({"prompt": 20, "completion": 5}), "x-fake-chunks": "5"}
    with httpx.Client(timeout=10) as client:
        while not stop.is_set():
            try:
                if stream:
                    with client.stream("POST", url, json={**BODY, "stream": True}, headers=headers) as r:
                        data = b"".join(r.iter_raw())
                        if r.status_code == 200 and data.rstrip().endswith(b"data: [DONE]"):
                            done.append(r.headers["x-request-id"])
                else:
                    r = client.post(url, json=BODY, headers=headers)
                    if r.status_code == 200 and r.json().get("usage"):
                        done.append(r.headers["x-request-id"])
            except (httpx.HTTPError, ValueError):
                if stop.is_set():
                    return
                time.sleep(0.01)


def test_sigkill_under_load_loses_nothing_completed(fake: FakeUpstream, tmp_path: Path, prices_dir: Path) -> None:
    args = ("--prices", str(prices_dir))
    proxy = Served(tmp_path, upstream=fake.base_url, args=args).start()
    completed: list[str] = []
    stop = threading.Event()
    threads = [threading.Thread(target=_client_loop, args=(proxy.base_url + "/chat/completions", i % 2 == 0,
                                                           completed, stop)) for i in range(12)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while len(completed) < 300 and time.monotonic() < deadline:
        time.sleep(0.02)
    proxy.kill()  # SIGKILL: no shutdown, no flush
    stop.set()
    for t in threads:
        t.join(15)
    assert len(completed) >= 100, proxy.output()

    # The same ledger, started again: the journal is replayed before serving.
    again = Served(tmp_path, upstream=fake.base_url, args=args).start()
    try:
        rows = again.rows(expect=len(completed))
        ids = collections.Counter(r["upstream_request_id"] for r in rows)
        missing = [i for i in completed if ids[i] == 0]
        assert not missing, f"{len(missing)} completed responses have no record"
        assert all(n == 1 for n in ids.values()), "a record was imported twice"
        # A restart with nothing new to replay changes nothing.
        again.stop()
        third = Served(tmp_path, upstream=fake.base_url, args=args).start()
        assert len(third.rows()) == len(rows)
        third.stop()
    finally:
        again.stop()
