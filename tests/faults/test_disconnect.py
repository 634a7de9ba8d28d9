"""Clients that leave: the upstream request is cancelled at once (its socket closed, as the
kernel sees it), the record says `client_closed` with estimated tokens, nothing leaks."""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fake_upstream import FakeUpstream
from tests.faults.helpers import open_connections, raw_http, wait_until
from tests.serve import free_port, wait_ready

CHAT = {"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": "count to a thousand"}]}
SLOW = {"x-fake-chunks": "4000", "x-fake-delay-ms": "50"}  # 200 s of stream if nobody leaves
WAIT = 60  # seconds: a generous deadline for a condition, met at once on an idle machine


def _leave_after_first_chunks(url: str, body: dict[str, Any], headers: dict[str, str]) -> None:
    with httpx.stream("POST", url, json=body, headers=headers, timeout=WAIT) as r:
        assert r.status_code == 200
        parts = r.iter_raw()
        next(parts)
        next(parts)


def test_concurrent_streams_abandoned_by_their_clients_close_their_upstream_connections(
        fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    n = 16
    bodies = [({**CHAT, "stream": True}, "/chat/completions"),
              ({"model": "claude-test", "max_tokens": 900, "stream": True, "messages": CHAT["messages"]}, "/messages"),
              ({"model": "gpt-test", "input": "count", "stream": True}, "/responses")]
    threads = [threading.Thread(target=_leave_after_first_chunks,
                                args=(proxy.base_url + bodies[i % 3][1], bodies[i % 3][0], SLOW))
               for i in range(n)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    # Every upstream socket is gone well before the streams would have ended by themselves (200 s):
    # the deadlines are generous for a loaded machine, and still far short of that.
    assert wait_until(lambda: open_connections(fake.port) == 0, timeout=WAIT), open_connections(fake.port)
    assert wait_until(lambda: fake.in_flight == 0, timeout=WAIT)
    assert time.monotonic() - t0 < 150
    assert open_connections(proxy.port) == 0  # nor does the proxy keep the clients' sockets
    rows = proxy.rows(expect=n)
    assert len(rows) == n
    for r in rows:
        assert (r["outcome"], r["code"], r["usage_source"]) == ("client_closed", 200, "estimated"), r["endpoint"]
        assert r["input_tokens"] > 0
    assert proxy.metric("llmmeter_requests_total", outcome="client_closed") == n
    r = httpx.post(proxy.base_url + "/chat/completions", json=CHAT)
    assert r.status_code == 200


def test_client_that_gives_up_while_the_upstream_thinks(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    try:
        httpx.post(proxy.base_url + "/chat/completions", json=CHAT, headers={"x-fake-hang": "1"}, timeout=1)
        raise AssertionError("the upstream was meant to hang")
    except httpx.ReadTimeout:
        pass
    assert wait_until(lambda: fake.in_flight == 0 and open_connections(fake.port) == 0, timeout=WAIT)
    [row] = proxy.rows(expect=1)
    assert (row["outcome"], row["code"], row["usage_source"]) == ("client_closed", 0, "estimated")
    assert row["input_tokens"] > 0 and row["output_tokens"] == 0


def test_client_that_leaves_while_sending_its_body(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    with socket.create_connection(("127.0.0.1", proxy.port)) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 5000\r\n\r\n" + json.dumps(CHAT).encode()[:20])
        time.sleep(0.3)
    [row] = proxy.rows(expect=1)
    assert (row["outcome"], row["code"]) == ("client_closed", 0)
    assert not fake.requests  # a body never finished is never forwarded
    assert raw_http(proxy.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").startswith(
        b"HTTP/1.1 200")


def test_finished_requests_keep_their_connections_for_reuse(fake: FakeUpstream, serve: Any) -> None:
    """The counterpart: an upstream connection is dropped only when its response was abandoned."""
    proxy = serve(upstream=fake.base_url)
    for _ in range(20):
        assert httpx.post(proxy.base_url + "/chat/completions", json={**CHAT, "stream": True}).status_code == 200
    assert 1 <= open_connections(fake.port) <= 2  # kept alive and reused, not one per request


PLAIN_UVICORN = """
import sys, uvicorn
from proxy.app import create_app
from proxy.settings import load
settings = load(None, env={}, overrides={"upstream": sys.argv[1], "db": sys.argv[2], "prices": sys.argv[3]})
uvicorn.run(create_app(settings), host="127.0.0.1", port=int(sys.argv[4]), http="httptools", log_level="warning")
"""


def test_under_a_server_without_the_disconnect_hook_a_leaving_client_is_still_seen(
        fake: FakeUpstream, tmp_path: Path, prices_dir: Path) -> None:
    # Under another server than llmmeter's own protocol, the relay waits in ASGI receive().
    port, db = free_port(), tmp_path / "plain.db"
    log = (tmp_path / "plain.log").open("w+b")
    proc = subprocess.Popen([sys.executable, "-c", PLAIN_UVICORN, fake.base_url, f"sqlite:///{db}",
                             str(prices_dir), str(port)], stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        wait_ready(proc, f"http://127.0.0.1:{port}/healthz", "plain uvicorn", lambda: log.name, 60)
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=CHAT, headers={"x-fake-hang": "1"},
                       timeout=1)
        assert wait_until(lambda: fake.in_flight == 0 and open_connections(fake.port) == 0, timeout=WAIT)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(20)
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT outcome, code, usage_source FROM requests").fetchall()
    assert rows == [("client_closed", 0, "estimated")]
