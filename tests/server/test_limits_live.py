"""The data plane limits against a real `llmmeter serve` (SPEC "Data plane limits"), over sockets.

Limits of a second or so keep these quick; every bound has generous slack."""

from __future__ import annotations

import json
import selectors
import socket
import time
from typing import Any

import httpx
import orjson

from tests.fake_upstream import FakeUpstream
from tests.faults.helpers import open_connections, raw_http, status_of, wait_until

CHAT = {"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": "count to a million"}]}
HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


def read_until_closed(s: socket.socket, timeout: float) -> bytes:
    s.settimeout(timeout)
    out = bytearray()
    try:
        while chunk := s.recv(65536):
            out += chunk
    except ConnectionResetError:
        pass
    return bytes(out)


def test_a_head_that_does_not_arrive_in_time_gets_408_and_is_closed(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url, config="[server]\nhead_timeout_s = 1\n")
    with socket.create_connection(("127.0.0.1", proxy.port)) as silent, \
            socket.create_connection(("127.0.0.1", proxy.port)) as halfway:
        halfway.sendall(HEAD)
        for s in (silent, halfway):
            # Neither would ever be closed but for the head timeout; a timeout here raises.
            res = read_until_closed(s, timeout=60)
            assert status_of(res) == 408, res[:200]
            assert orjson.loads(res.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "request_timeout"
    assert not fake.requests
    assert httpx.post(proxy.base_url + "/chat/completions", json=CHAT).status_code == 200


def test_300_trickling_half_heads_are_all_closed_in_the_head_timeout(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url, config="[server]\nhead_timeout_s = 1\n")
    head = HEAD + b"X-Slow: " + b"s" * 100
    socks = [socket.create_connection(("127.0.0.1", proxy.port)) for _ in range(300)]
    t0 = time.monotonic()
    sel = selectors.DefaultSelector()
    for s in socks:
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
    open_left, sent = set(socks), 0
    try:
        # The trickle would take over 150 s to finish the heads: a closing within 60 s is the head
        # timeout, counted from the first byte (a generous bound for a loaded machine).
        while open_left and time.monotonic() - t0 < 60:
            for s in list(open_left):  # one byte each, about once a second
                try:
                    s.send(head[sent:sent + 1])
                except OSError:
                    open_left.discard(s)
            sent += 1
            until = time.monotonic() + 1
            while open_left and (left := until - time.monotonic()) > 0:
                for key, _ in sel.select(left):
                    s = key.fileobj
                    assert isinstance(s, socket.socket)
                    try:
                        if s.recv(65536):
                            continue  # the 408; the close follows
                    except OSError:
                        pass
                    sel.unregister(s)
                    open_left.discard(s)
        elapsed = time.monotonic() - t0
        assert not open_left, f"{len(open_left)} of 300 still open after {elapsed:.1f} s"
        assert wait_until(lambda: open_connections(proxy.port) == 0, timeout=60)
    finally:
        for s in socks:
            s.close()
    assert httpx.post(proxy.base_url + "/chat/completions", json=CHAT).status_code == 200


def test_a_body_that_stops_coming_is_closed_and_recorded_client_closed(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url, config="[server]\nbody_timeout_s = 1\n")
    with socket.create_connection(("127.0.0.1", proxy.port)) as s:
        s.sendall(HEAD + b"Content-Length: 5000\r\n\r\n" + json.dumps(CHAT).encode()[:20])
        res = read_until_closed(s, timeout=60)  # never closed but for the body timeout
    assert status_of(res) == 408, res[:200]
    [row] = proxy.rows(expect=1)
    assert (row["outcome"], row["code"]) == ("client_closed", 0)
    assert not fake.requests  # a body never finished is never forwarded


def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(fake: FakeUpstream, serve: Any) -> None:
    # The head timeout is long: only the idle timeout can close this one quickly.
    proxy = serve(upstream=fake.base_url, config="[server]\nidle_timeout_s = 1\nhead_timeout_s = 60\n")
    with socket.create_connection(("127.0.0.1", proxy.port)) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        t0 = time.monotonic()
        res = read_until_closed(s, timeout=20)
        assert time.monotonic() - t0 < 4  # not uvicorn's own keep-alive timeout (5 s)
    assert status_of(res) == 200 and res.count(b"HTTP/1.1 ") == 1  # answered, then closed without a word


def test_a_client_that_stops_reading_is_dropped_and_its_upstream_released(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url, config="[server]\nsend_timeout_s = 1\n")
    body = json.dumps({**CHAT, "stream": True}).encode()
    # ~16 MB of stream, far past every socket buffer between the fake and this client.
    request = (HEAD + b"X-Fake-Chunks: 4000\r\nX-Fake-Word: " + b"w" * 4000 + b"\r\n"
               b"Content-Length: %d\r\n\r\n" % len(body) + body)
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", proxy.port))
        s.sendall(request)
        assert s.recv(100).startswith(b"HTTP/1.1 200 ")
        # Reads nothing more, and stays connected: the proxy must let go on its own.
        assert wait_until(lambda: fake.in_flight == 1, timeout=60)
        assert wait_until(lambda: open_connections(fake.port) == 0 and fake.in_flight == 0, timeout=20), \
            (open_connections(fake.port), fake.in_flight)
        assert wait_until(lambda: open_connections(proxy.port) == 0, timeout=60)
    [row] = proxy.rows(expect=1)
    assert (row["outcome"], row["code"], row["usage_source"]) == ("client_closed", 200, "estimated")


def test_a_transfer_encoding_other_than_chunked_gets_501(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    for encoding in (b"gzip", b"identity", b"gzip, chunked", b"chunked, gzip"):
        res = raw_http(proxy.port, HEAD + b"Transfer-Encoding: " + encoding + b"\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
        assert status_of(res) == 501, (encoding, res[:200])
        assert orjson.loads(res.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "unsupported_transfer_encoding"
    assert not fake.requests


def test_trailers_are_dropped_and_an_endless_one_is_refused(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    body = json.dumps(CHAT).encode()
    chunked = HEAD + b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n%x\r\n" % len(body) + body + b"\r\n0\r\n"
    res = raw_http(proxy.port, chunked + b"Authorization: Bearer evil\r\nX-Trail: 1\r\n\r\n")
    assert status_of(res) == 200, res[:300]
    assert "x-trail" not in fake.requests[-1]["headers"] and "authorization" not in fake.requests[-1]["headers"]
    with socket.create_connection(("127.0.0.1", proxy.port)) as s:
        s.sendall(chunked + b"X-Big: ")
        sent = 0
        try:
            while sent < 150_000_000:
                s.sendall(b"a" * 8192)
                sent += 8192
                time.sleep(0.002)
        except OSError:  # the proxy closed: reset or broken pipe
            pass
        res = read_until_closed(s, timeout=10)
    assert status_of(res) == 431 and sent < 1_000_000, (sent, res[:200])
    assert len(fake.requests) == 1
