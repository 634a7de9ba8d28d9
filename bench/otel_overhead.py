"""What OpenTelemetry export adds to the relay when the collector is a black hole.

    python bench/otel_overhead.py [--requests 1000] [--rounds 5] [--out bench/results/otel.json]

Starts the fake upstream (as bench/relay.py does: usage on every reply), a "collector" that
accepts connections and never answers (the worst collector: each export waits for its
timeout), and two `llmmeter serve`: one with export off, one with `[otel] endpoint` at the
black hole and a queue of 2048 spans. Sequential keep-alive latency, non-streamed, is taken
on each in alternation, round after round, so both see the same machine; the added p50 is the
median over the rounds of (export on) − (export off). Target: ≤ 1 ms. Afterwards the
dropped-span counter of the one with export on shows the queue was full and shedding, and
the peak RSS of both shows what the bounded queue holds.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from procs import free_port, keepalive_seconds, pct, rss_mb, tree, wait_up
from relay import CHAT, MESSAGES, MODEL, ROOT, UPSTREAM_DEFAULTS

TARGET_ADDED_P50_MS = 1.0
BODY = json.dumps({"model": MODEL, "messages": MESSAGES}).encode()


def black_hole() -> tuple[socket.socket, int]:
    """A listener whose connections are accepted and held, never read from or answered."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1024)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    return server, int(server.getsockname()[1])


def dropped(port: int) -> float:
    import http.client

    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    for line in text.splitlines():
        if line.startswith("llmmeter_otel_dropped_spans_total "):
            return float(line.split()[1])
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "otel.json")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="llmmeter-otel-bench-"))
    hole, hole_port = black_hole()
    up, off, on = free_port(), free_port(), free_port()
    py = sys.executable
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLMMETER_", "OTEL_"))}
    quiet: dict[str, Any] = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    (tmp / "otel.toml").write_text(f'[otel]\nendpoint = "http://127.0.0.1:{hole_port}"\n')
    defaults = [x for k, v in UPSTREAM_DEFAULTS.items() for x in ("--default", f"{k}={v}")]
    serve = [py, "-m", "proxy", "serve", "--upstream", f"http://127.0.0.1:{up}/v1"]
    procs = {
        "upstream": (subprocess.Popen([py, str(ROOT / "tests" / "fake_upstream.py"), "--port", str(up), *defaults],
                                      env=env, **quiet), up),
        "export_off": (subprocess.Popen([*serve, "--port", str(off), "--db", f"sqlite:///{tmp}/off.db"],
                                        env=env, cwd=tmp, **quiet), off),
        "export_on": (subprocess.Popen([*serve, "--port", str(on), "--db", f"sqlite:///{tmp}/on.db",
                                        "--config", str(tmp / "otel.toml")], env=env, cwd=tmp, **quiet), on),
    }
    headers = {"content-type": "application/json"}
    try:
        for proc, port in procs.values():
            wait_up(port, proc)
        rounds = []
        for i in range(a.rounds):
            print(f"  round {i + 1}", file=sys.stderr)
            p50 = {name: pct(keepalive_seconds(port, CHAT, a.requests, BODY, headers), 0.5) * 1000
                   for name, port in (("export_off", off), ("export_on", on))}
            rounds.append({**p50, "added_p50_ms": p50["export_on"] - p50["export_off"]})
        added = statistics.median(r["added_p50_ms"] for r in rounds)
        results = {"requests_per_round": a.requests, "rounds": rounds, "added_p50_ms_median": added,
                   "target_added_p50_ms": TARGET_ADDED_P50_MS, "meets_target": added <= TARGET_ADDED_P50_MS,
                   "dropped_spans": dropped(on), "spans_made": 2 * a.rounds * (a.requests + min(50, a.requests)),
                   # Peak RSS: export on holds at most queue_size spans more than export off.
                   "peak_rss_mb": {name: rss_mb(tree(procs[name][0].pid)) for name in ("export_off", "export_on")}}
    finally:
        for proc, _ in procs.values():
            proc.terminate()
        for proc, _ in procs.values():
            proc.wait(30)
        hole.close()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
