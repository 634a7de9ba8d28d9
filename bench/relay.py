"""Relay benchmark: what llmmeter adds to a call, beside a direct call and a no-op relay.

    python bench/relay.py [--requests 2000] [--duration 5] [--out bench/results/relay.json]

Starts, in one run: the fake upstream (tests/fake_upstream.py), a no-op relay on the same
stack (bench/noop_relay.py) and `llmmeter serve` with a fresh SQLite ledger. Measures
sequential keep-alive latency (non-streamed, p50/p99), time to first byte of a stream,
and throughput at 32 connections with wrk (Debian package `wrk`) when it is installed.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BODY = json.dumps({"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": "hello"}]}).encode()
STREAM_BODY = json.dumps({"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": "hello"}],
                          "stream": True}).encode()
HEADERS = {"content-type": "application/json", "x-fake-usage": json.dumps({"prompt": 1200, "cached": 1000,
                                                                            "completion": 50})}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_up(port: int, path: str = "/v1/models") -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", path)
            c.getresponse().read()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"port {port} did not come up")


def sequential(port: int, n: int, body: bytes, first_byte: bool = False) -> list[float]:
    """Per-request seconds over one keep-alive connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    times = []
    for i in range(n + 50):
        t = time.perf_counter()
        conn.request("POST", "/v1/chat/completions", body=body, headers=HEADERS)
        r = conn.getresponse()
        if first_byte:
            r.read(1)
            dt = time.perf_counter() - t
            r.read()
        else:
            r.read()
            dt = time.perf_counter() - t
        if i >= 50:  # warm-up
            times.append(dt)
    conn.close()
    return times


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def wrk(port: int, duration: int, connections: int, stream: bool) -> float | None:
    if shutil.which("wrk") is None:
        return None
    body = (STREAM_BODY if stream else BODY).decode()
    hdrs = "".join(f'wrk.headers["{k}"] = {json.dumps(v)}\n' for k, v in HEADERS.items())
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(f'wrk.method = "POST"\nwrk.body = {json.dumps(body)}\n{hdrs}')
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "-s", script.name,
                          f"http://127.0.0.1:{port}/v1/chat/completions"], capture_output=True, text=True)
    os.unlink(script.name)
    m = re.search(r"Requests/sec:\s+([\d.]+)", out.stdout)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out.stdout)
    if errors:
        print(f"  wrk saw {errors.group(1)} error responses on port {port}", file=sys.stderr)
    return float(m.group(1)) if m else None


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def ledger_summary(port: int, db: Path) -> dict[str, int]:
    """Rows by outcome and usage source: shows what a run metered (e.g. requests wrk abandoned)."""
    import sqlite3

    time.sleep(1)  # let the importer catch up
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT outcome, usage_source, count(*) FROM requests GROUP BY 1, 2").fetchall()
    return {f"{outcome}/{source}": n for outcome, source, n in rows}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "relay.json")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="llmmeter-bench-"))
    up, noop, meter = free_port(), free_port(), free_port()
    py = sys.executable
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMMETER_")}
    procs = [
        subprocess.Popen([py, str(ROOT / "tests" / "fake_upstream.py"), "--port", str(up)], env=env),
        subprocess.Popen([py, str(ROOT / "bench" / "noop_relay.py"), "--upstream", f"http://127.0.0.1:{up}",
                          "--port", str(noop)], env=env),
        subprocess.Popen([py, "-m", "proxy", "serve", "--port", str(meter), "--upstream",
                          f"http://127.0.0.1:{up}/v1", "--db", f"sqlite:///{tmp}/bench.db"], env=env, cwd=tmp,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    ]
    try:
        for port in (up, noop, meter):
            wait_up(port)
        results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                               "platform": platform.platform()}, "paths": {}}
        for name, port in (("direct", up), ("noop_relay", noop), ("llmmeter", meter)):
            lat = sequential(port, a.requests, BODY)
            ttfb = sequential(port, max(200, a.requests // 4), STREAM_BODY, first_byte=True)
            results["paths"][name] = {
                "p50_ms": statistics.median(lat) * 1000, "p99_ms": pct(lat, 0.99) * 1000,
                "stream_ttfb_p50_ms": statistics.median(ttfb) * 1000,
                "rps_32": wrk(port, a.duration, 32, stream=False),
                "rps_32_stream": wrk(port, a.duration, 32, stream=True),
            }
        results["llmmeter_peak_rss_mb"] = rss_mb(procs[2].pid)
        results["ledger_rows"] = ledger_summary(meter, tmp / "bench.db")
        d, m = results["paths"]["direct"], results["paths"]["llmmeter"]
        results["added_p50_ms"] = m["p50_ms"] - d["p50_ms"]
        results["added_p99_ms"] = m["p99_ms"] - d["p99_ms"]
        results["added_stream_ttfb_ms"] = m["stream_ttfb_p50_ms"] - d["stream_ttfb_p50_ms"]
        if d["rps_32"] and m["rps_32"]:
            results["throughput_vs_direct"] = m["rps_32"] / d["rps_32"]
        if d["rps_32_stream"] and m["rps_32_stream"]:
            results["stream_throughput_vs_direct"] = m["rps_32_stream"] / d["rps_32_stream"]
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(results, indent=2))
        print(f"{'path':<12} {'p50 ms':>8} {'p99 ms':>8} {'TTFB ms':>8} {'req/s@32':>9} {'stream req/s@32':>15}")
        for name, r in results["paths"].items():
            print(f"{name:<12} {r['p50_ms']:8.3f} {r['p99_ms']:8.3f} {r['stream_ttfb_p50_ms']:8.3f} "
                  f"{r['rps_32'] or 0:9.0f} {r['rps_32_stream'] or 0:15.0f}")
        print(f"added by llmmeter: p50 {results['added_p50_ms']:.3f} ms, p99 {results['added_p99_ms']:.3f} ms, "
              f"stream TTFB {results['added_stream_ttfb_ms']:.3f} ms; "
              f"peak RSS {results['llmmeter_peak_rss_mb']:.0f} MB")
        print(f"ledger rows: {results['ledger_rows']}")
        print(f"wrote {a.out}")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
