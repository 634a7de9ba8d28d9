"""`kill -9` while 24 streams are in flight, then a restart on the same ledger: every
response that completed at its client has exactly one record, and nothing is doubled."""

from __future__ import annotations

import collections
import json
import threading
import time
from pathlib import Path

import httpx

from tests.fake_upstream import FakeUpstream
from tests.faults.helpers import wait_until
from tests.serve import Served

STREAMS = 24
BODIES = [
    ("/chat/completions", {"model": "kimi-k3.1-pro", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
     b"data: [DONE]"),
    ("/messages", {"model": "claude-test", "max_tokens": 8, "stream": True,
                   "messages": [{"role": "user", "content": "hi"}]}, b'"type":"message_stop"}'),
    ("/responses", {"model": "gpt-test", "input": "hi", "stream": True}, b'"type":"response.completed"'),
]
HEADERS = {"x-fake-usage": json.dumps({"prompt": 20, "completion": 6}), "x-fake-chunks": "6",
           "x-fake-delay-ms": "15"}


class Client(threading.Thread):
    """Streams one dialect in a loop; remembers the ids of responses it received in full."""

    def __init__(self, base_url: str, i: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.path, self.body, self.end = BODIES[i % len(BODIES)]
        self.url, self.stop = base_url + self.path, stop
        self.completed: list[str] = []
        self.streaming = False

    def run(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self.stop.is_set():
                try:
                    with client.stream("POST", self.url, json=self.body, headers=HEADERS) as r:
                        self.streaming = True
                        data = b"".join(r.iter_raw())
                        last_event = data.rstrip().rsplit(b"\n\n", 1)[-1]
                        if r.status_code == 200 and self.end in last_event:  # the stream's own end arrived
                            self.completed.append(r.headers["x-request-id"])
                except httpx.HTTPError:
                    time.sleep(0.01)
                finally:
                    self.streaming = False


def test_kill_9_under_24_concurrent_streams(fake: FakeUpstream, tmp_path: Path, prices_dir: Path) -> None:
    args = ("--prices", str(prices_dir))
    proxy = Served(tmp_path, upstream=fake.base_url, args=args).start()
    stop = threading.Event()
    clients = [Client(proxy.base_url, i, stop) for i in range(STREAMS)]
    for c in clients:
        c.start()
    assert wait_until(lambda: sum(len(c.completed) for c in clients) >= 200, timeout=60)
    assert wait_until(lambda: sum(c.streaming for c in clients) >= STREAMS // 2, timeout=60)
    in_flight = fake.in_flight
    proxy.kill()  # SIGKILL mid-stream: no shutdown, no flush
    stop.set()
    for c in clients:
        c.join(15)
    assert in_flight > 0  # streams really were cut by the kill
    completed = [i for c in clients for i in c.completed]
    assert all(c.completed for c in clients)  # every dialect and client got through some

    again = Served(tmp_path, upstream=fake.base_url, args=args).start()
    try:
        rows = again.rows(expect=len(completed))
        ids = collections.Counter(r["upstream_request_id"] for r in rows)
        missing = [i for i in completed if ids[i] == 0]
        assert not missing, f"{len(missing)} of {len(completed)} completed responses have no record"
        assert max(ids.values()) == 1, "a response was recorded twice"
        assert len({r["id"] for r in rows}) == len(rows)
        done = [r for r in rows if r["upstream_request_id"] in set(completed)]
        assert {(r["outcome"], r["usage_source"]) for r in done} == {("ok", "upstream")}
        assert {r["endpoint"] for r in done} == {"chat", "messages", "responses"}
        # Responses cut by the kill may have a record (journaled, then the client lost the end) or not;
        # the restarted proxy serves as before.
        r = httpx.post(again.base_url + "/chat/completions", json={**BODIES[0][1], "stream": False})
        assert r.status_code == 200
    finally:
        again.stop()
