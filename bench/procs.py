"""What the benchmarks share about the processes they start and time: ports, readiness,
process trees, CPU seconds, RSS and keep-alive latency, read from /proc."""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import time
from pathlib import Path

Proc = subprocess.Popen[bytes]
TCK = os.sysconf("SC_CLK_TCK")


class Skip(Exception):
    """A process that cannot be measured (it exited, or never answered): its reason is reported."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_up(port: int, procs: Proc | list[Proc], timeout: float = 120) -> None:
    """Until the port answers HTTP at all (any status: not every gateway has /v1/models); Skip
    when one of the processes exits first or the time runs out."""
    watched = procs if isinstance(procs, list) else [procs]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in watched:
            if proc.poll() is not None:
                raise Skip(f"its process exited with {proc.returncode} before answering on port {port}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/")
            c.getresponse().read()
            return
        except OSError:
            time.sleep(0.2)
    raise Skip(f"port {port} did not answer within {timeout:.0f} s")


def keepalive_seconds(port: int, url: str, n: int, body: bytes, headers: dict[str, str],
                      first_byte: bool = False) -> list[float]:
    """Per-request seconds of n POSTs over one keep-alive connection, after a warm-up of up to 20;
    with `first_byte`, to the answer's first byte (a stream's)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    times = []
    warm = min(20, n)
    for i in range(n + warm):
        t = time.perf_counter()
        conn.request("POST", url, body=body, headers=headers)
        r = conn.getresponse()
        if r.status != 200:
            raise SystemExit(f"port {port} answered {r.status}: {r.read()[:300]!r}")
        if first_byte:
            r.read(1)
            dt = time.perf_counter() - t
            r.read()
        else:
            r.read()
            dt = time.perf_counter() - t
        if i >= warm:
            times.append(dt)
    conn.close()
    return times


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def tree(pid: int) -> list[int]:
    """pid and all its descendants (nginx's workers, LiteLLM's children)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_s(pids: list[int]) -> float:
    """User and system seconds of the processes (all their threads) and of their waited-for children."""
    total = 0.0
    for p in pids:
        try:
            f = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in f[11:15]) / TCK
    return total


def rss_mb(pids: list[int], field_name: str = "VmHWM") -> float:
    """Peak RSS (VmHWM), or with field_name="VmRSS" the current one, summed over the processes."""
    total = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith(field_name + ":"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024
