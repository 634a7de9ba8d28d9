"""CPU per request of llmmeter against the no-op relay, in interleaved wrk rounds.

    python bench/relay_cpu.py [--rounds 7] [--duration 5] [--connections 32] [--stream] [--layers]
                              [--tree NAME=PATH ...] [--out FILE]

Starts the fake upstream (tests/fake_upstream.py, every reply with usage), the no-op relay
on llmmeter's own stack (bench/noop_relay.py) and `llmmeter serve` on a fresh SQLite
ledger with default settings. With `--tree NAME=PATH` (repeatable) it starts one
`llmmeter serve` per source tree instead, each run from that tree, so two versions of the
code are measured against each other in the same run. Each round runs wrk against every
path in turn (a 1 s warm-up first), and reads from /proc the CPU the path's process spent
(all its threads) and the CPU the upstream spent. CPU per request is far steadier than
requests per second on a shared machine, and alternating the paths round by round lets
them share whatever else the machine is doing. Reported: per path, the median over the
rounds of µs of CPU per request and of requests per second, and each path's ratio to the
no-op relay and to direct.

With `--layers` it also measures the relays under the no-op relay, one layer of llmmeter's
stack added at a time: `floor_bytes` (bench/floor_relay.py: bytes in and out, no ASGI),
`floor_task` (a task per request), `floor_client` (the request read into Python and sent
through llmmeter's upstream client, still no ASGI) and `noop_stock` (the no-op relay on
uvicorn's own httptools protocol); `noop_relay` then adds llmmeter's serving protocol, and
llmmeter the metering.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from procs import cpu_s, free_port, wait_up

ROOT = Path(__file__).resolve().parents[1]
MODEL = "kimi-k3.1-pro"
BODY = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hello"}]})
STREAM_BODY = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "stream": True})
UPSTREAM = {"x-fake-usage": json.dumps({"prompt": 1200, "cached": 1000, "completion": 50}), "x-fake-chunks": "30"}


def wrk(port: int, duration: int, connections: int, script: str) -> tuple[int, float]:
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--timeout", "30s", "-s", script,
                          f"http://127.0.0.1:{port}/v1/chat/completions"], capture_output=True, text=True).stdout
    n = re.search(r"(\d+) requests in", out)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if n is None or rps is None or bad is not None:
        raise SystemExit(f"wrk on port {port} failed or got non-2xx answers:\n{out}")
    return int(n.group(1)), float(rps.group(1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--stream", action="store_true")
    ap.add_argument("--layers", action="store_true", help="also the relays under the no-op relay, layer by layer")
    ap.add_argument("--tree", action="append", default=[], help="NAME=PATH: an llmmeter source tree to serve")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    trees = dict(t.split("=", 1) for t in a.tree) or {"llmmeter": str(ROOT)}
    py = sys.executable
    tmp = Path(tempfile.mkdtemp(prefix="llmmeter-cpu-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLMMETER_", "PROMETHEUS_MULTIPROC"))}
    quiet: dict[str, Any] = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    defaults = [x for k, v in UPSTREAM.items() for x in ("--default", f"{k}={v}")]
    up = free_port()
    procs: dict[str, tuple[subprocess.Popen[bytes], int]] = {
        "direct": (subprocess.Popen([py, str(ROOT / "tests" / "fake_upstream.py"), "--port", str(up), *defaults],
                                    env=env, **quiet), up)}
    if a.layers:
        for mode in ("bytes", "task", "client"):
            port = free_port()
            procs[f"floor_{mode}"] = (subprocess.Popen(
                [py, str(ROOT / "bench" / "floor_relay.py"), "--upstream-port", str(up), "--port", str(port),
                 "--mode", mode], env=env, **quiet), port)
        port = free_port()
        procs["noop_stock"] = (subprocess.Popen(
            [py, str(ROOT / "bench" / "noop_relay.py"), "--upstream", f"http://127.0.0.1:{up}", "--port", str(port),
             "--protocol", "stock"], env=env, **quiet), port)
    port = free_port()
    procs["noop_relay"] = (subprocess.Popen([py, str(ROOT / "bench" / "noop_relay.py"), "--upstream",
                                             f"http://127.0.0.1:{up}", "--port", str(port)], env=env, **quiet), port)
    for name, path in trees.items():
        port = free_port()
        procs[name] = (subprocess.Popen([py, "-m", "proxy", "serve", "--port", str(port), "--upstream",
                                         f"http://127.0.0.1:{up}/v1", "--db", f"sqlite:///{tmp}/{name}.db"],
                                        env={**env, "PYTHONPATH": str(Path(path).resolve())}, cwd=tmp, **quiet), port)
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(f'wrk.method = "POST"\nwrk.body = {json.dumps(STREAM_BODY if a.stream else BODY)}\n'
                'wrk.headers["content-type"] = "application/json"\n')
        script = f.name
    results: dict[str, list[dict[str, float]]] = {name: [] for name in procs}
    try:
        for proc, port in procs.values():
            wait_up(port, proc)
        for _, port in procs.values():
            wrk(port, 1, a.connections, script)
        time.sleep(2)
        upstream_pid = procs["direct"][0].pid
        for i in range(a.rounds):
            order = list(procs.items())
            if i % 2:
                order.reverse()  # neither side always runs first after the other
            for name, (proc, port) in order:
                before, up_before = cpu_s([proc.pid]), cpu_s([upstream_pid])
                n, rps = wrk(port, a.duration, a.connections, script)
                own = cpu_s([proc.pid]) - before
                r = {"us_per_req": own / n * 1e6, "rps": rps,
                     "upstream_us_per_req": (cpu_s([upstream_pid]) - up_before) / n * 1e6}
                if name == "direct":
                    r["us_per_req"] = r["upstream_us_per_req"]
                results[name].append(r)
                print(f"round {i + 1} {name}: {r['us_per_req']:.1f} µs/req, {rps:.0f} req/s", file=sys.stderr)
    finally:
        for proc, _ in procs.values():
            proc.terminate()
        for proc, _ in procs.values():
            proc.wait(20)
        os.unlink(script)
    summary: dict[str, Any] = {"command": " ".join(["python", "bench/relay_cpu.py", *sys.argv[1:]]),
                               "load_avg_end": os.getloadavg(), "paths": {}}
    for name, rounds in results.items():
        summary["paths"][name] = {"us_per_req_median": statistics.median(r["us_per_req"] for r in rounds),
                                  "us_per_req_rounds": [round(r["us_per_req"], 1) for r in rounds],
                                  "rps_median": statistics.median(r["rps"] for r in rounds)}
    direct = summary["paths"]["direct"]["rps_median"]
    noop = summary["paths"]["noop_relay"]["us_per_req_median"]
    print(f"{'path':<14} {'µs/req':>8} {'× noop':>7} {'req/s':>8} {'× direct':>9}")
    for name, s in summary["paths"].items():
        print(f"{name:<14} {s['us_per_req_median']:8.1f} {s['us_per_req_median'] / noop:7.2f} "
              f"{s['rps_median']:8.0f} {s['rps_median'] / direct:9.2f}")
    if a.out:
        a.out.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
