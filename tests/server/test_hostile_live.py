"""Hostile clients against a real `llmmeter serve` over sockets (SPEC "Version 4 additions", serving side):
request smuggling through an upgrade offer, pipelined floods without a key, keyless bodies that never end."""

from __future__ import annotations

import contextlib
import hashlib
import socket
from pathlib import Path
from typing import Any

import httpx

from tests.fake_upstream import FakeUpstream
from tests.faults.helpers import open_connections, status_of, wait_until

KEY = "sk-team-a"
TENANTS = f'[[tenant]]\nname = "team-a"\nkey_sha256 = ["{hashlib.sha256(KEY.encode()).hexdigest()}"]\n'
VICTIM = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-victim\r\n"
          b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def read_response(s: socket.socket) -> bytes:
    """One response with a Content-Length body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    while len(body) < length:
        chunk = s.recv(65536)
        assert chunk
        body += chunk
    return head + b"\r\n\r\n" + body


def test_an_upgrade_offer_cannot_smuggle_the_next_request_upstream(fake: FakeUpstream, serve: Any) -> None:
    """The attacker's POST declares the victim's request, which a front proxy sends next on the same
    connection, as its body. It must go upstream as that body, never as a request with the victim's key."""
    proxy = serve(upstream=fake.base_url)
    attack = (b"POST /v1/files HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, keep-alive\r\nUpgrade: h2c\r\n"
              b"Authorization: Bearer sk-attacker\r\nContent-Type: application/octet-stream\r\n"
              b"Content-Length: %d\r\n\r\n" % len(VICTIM))
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=20) as s:
        s.sendall(attack)
        s.sendall(VICTIM)  # a later read: the body arrives after the head was answered on `main` before
        first = read_response(s)
        s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-attacker\r\n\r\n")
        second = read_response(s)
    assert status_of(first) in (200, 404) and status_of(second) == 200  # the upstream's own answers
    assert [(r["method"], r["path"]) for r in fake.requests] == [("POST", "/v1/files"), ("GET", "/v1/models")]
    assert fake.requests[0]["body"] == VICTIM
    assert all(r["headers"].get("authorization") != "Bearer sk-victim" for r in fake.requests)
    assert "upgrade" not in fake.requests[0]["headers"]


def test_keyless_pipelined_floods_that_read_nothing_do_not_grow_memory(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url, config=TENANTS)
    assert proxy.proc is not None
    flood = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n" * 7000  # 256 KiB
    httpx.get(proxy.base_url + "/models")  # warm: the first answer's allocations are not the flood's
    before = rss_kib(proxy.proc.pid)
    socks = []
    try:
        for _ in range(40):
            s = socket.create_connection(("127.0.0.1", proxy.port), timeout=20)
            s.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                s.send(flood)  # as much as the kernel takes; llmmeter reads one request, then waits
            socks.append(s)
        for s in socks:  # every connection was read and answered once: its flood reached llmmeter
            s.setblocking(True)
            assert s.recv(12).startswith(b"HTTP/1.1 401")
        grown_mib = (rss_kib(proxy.proc.pid) - before) / 1024
        assert grown_mib < 64, f"RSS grew {grown_mib:.0f} MiB for 40 pipelined floods"
    finally:
        for s in socks:
            s.close()
    assert not fake.requests


def test_keyless_bodies_sent_a_byte_at_a_time_do_not_hold_connections(fake: FakeUpstream, serve: Any) -> None:
    """A POST with no key and a huge Content-Length gets its 401 at once; the body is not drained to
    its declared end, so a byte per second (well inside body_timeout_s) holds nothing open."""
    proxy = serve(upstream=fake.base_url, config=TENANTS + "[server]\nbody_timeout_s = 30\n")
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n{"
    socks = [socket.create_connection(("127.0.0.1", proxy.port), timeout=20) for _ in range(100)]
    try:
        for s in socks:
            s.sendall(head)
        for s in socks:
            assert status_of(s.recv(65536)) == 401

        def trickle_and_check() -> bool:
            for s in socks:
                with contextlib.suppress(OSError):
                    s.send(b"x")
            return open_connections(proxy.port) == 0

        assert wait_until(trickle_and_check, timeout=60, every=0.5), open_connections(proxy.port)
    finally:
        for s in socks:
            s.close()
    assert not fake.requests
