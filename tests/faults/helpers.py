"""What the fault tests read from the outside: sockets in /proc, raw HTTP, series counts."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

# /proc/net/tcp states that still hold a connection open on the server's side.
_OPEN_STATES = {"01", "03", "08"}  # ESTABLISHED, SYN_RECV, CLOSE_WAIT


def open_connections(port: int) -> int:
    """TCP connections a server listening on 127.0.0.1:`port` still has open, as the kernel sees them."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state = fields[1], fields[3]
        if int(local.rsplit(":", 1)[1], 16) == port and state in _OPEN_STATES:
            count += 1
    return count


def connections_to(port: int) -> int:
    """TCP connections to 127.0.0.1:`port` its clients still hold open, as the kernel sees them."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        remote, state = fields[2], fields[3]
        if int(remote.rsplit(":", 1)[1], 16) == port and state in _OPEN_STATES:
            count += 1
    return count


def listen_address(port: int) -> str | None:
    """The IPv4 address a socket listening on `port` is bound to, e.g. "127.0.0.1"."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        addr, port_hex = fields[1].split(":")
        if int(port_hex, 16) == port and fields[3] == "0A":  # LISTEN
            return socket.inet_ntoa(bytes.fromhex(addr)[::-1])
    return None


def raw_http(port: int, request: bytes, timeout: float = 10) -> bytes:
    """Send bytes as they are (no client normalising the path) and read until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        out = bytearray()
        try:
            while chunk := s.recv(65536):
                out += chunk
        except (ConnectionResetError, TimeoutError):
            pass
        return bytes(out)


def get(path: str, host: str = "x", extra: bytes = b"") -> bytes:
    return b"GET " + path.encode() + b" HTTP/1.1\r\nHost: " + host.encode() + b"\r\n" + extra + \
        b"Connection: close\r\n\r\n"


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1]) if response.startswith(b"HTTP/1.1 ") else 0


def series(url: str, headers: dict[str, str] | None = None) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    """Every sample name and label set /metrics exposes."""
    text = httpx.get(url + "/metrics", headers=headers, timeout=10).text
    return {(s.name, tuple(sorted(s.labels.items())))
            for family in text_string_to_metric_families(text) for s in family.samples}


def wait_until(cond: Callable[[], bool], timeout: float = 60.0, every: float = 0.05) -> bool:
    """Poll `cond` until it holds; the deadline is generous (a loaded machine is slow), and met
    conditions return at once, so it costs nothing on an idle one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(every)
    return cond()
