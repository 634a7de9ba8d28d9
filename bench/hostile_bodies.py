"""Adversarial JSON bodies against a running llmmeter: what each costs in memory and in other clients' latency.

    python bench/hostile_bodies.py [--mb 30] [--out bench/results/hostile_bodies.json]

Starts two fake upstreams (tests/fake_upstream.py; the probe's calls go to the second, so a
stall of the first never shows as llmmeter's) and `llmmeter serve` with a fresh SQLite ledger,
then, one case at a time, sends a body within the size limits while a probe client makes
small chat calls back to back on its own connection, and samples llmmeter's RSS every
10 ms. For each case: the peak RSS above the idle process, and the probe's worst latency and
p99 while the case ran, beside its p50 at rest (SECURITY.md: "a prompt cannot stall the
relay"; target: ≤ 300 MiB added and ≤ 100 ms added to other clients).

Cases (requests up to `--mb` MiB, under the default 32 MiB limit):
- objects: a chat request whose `messages` hold millions of `{}`;
- numbers: an embeddings request of millions of token ids;
- strings: a chat request with millions of empty strings in an unknown field;
- nesting: a chat request holding arrays nested 500 deep, repeated;
- tools: a streamed chat request with tens of MiB of tool definitions and no usage in the
  answer (the estimator renders the tools);
- answers: four concurrent embeddings answers of ~62 MiB each (2,000 × 3,072 floats).
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from procs import free_port, rss_mb, wait_up
from relay import ROOT

MODEL = "kimi-k3.1-pro"
# The probe's model is routed to an upstream of its own, so what it measures is llmmeter's loop,
# not the fake upstream's (which builds and parses the same huge bodies on one loop).
PROBE = json.dumps({"model": "probe-model", "messages": [{"role": "user", "content": "hi"}]}).encode()


def bodies(mb: int) -> dict[str, tuple[str, bytes, dict[str, str], int]]:
    """name -> (path, body, headers, how many sent at once)."""
    size = mb << 20
    chat = b'{"model": "' + MODEL.encode() + b'", "messages": [{"role": "user", "content": "hi"}'
    objects = chat + b", {}" * ((size - len(chat)) // 4) + b"]}"
    numbers = b'{"model": "text-embedding-3-small", "input": [' + b"0," * ((size - 64) // 2) + b"0]}"
    strings = chat + b'], "x": [' + b'"",' * ((size - len(chat)) // 3) + b'""]}'
    deep = b"[" * 500 + b"]" * 500
    nesting = chat + b'], "x": [' + b",".join([deep] * (size // len(deep))) + b"]}"
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {f"p{i}": {"type": "string", "description": "d" * 40} for i in range(2000)}}}}
    one = json.dumps(tool).encode()
    tools = (b'{"model": "' + MODEL.encode() + b'", "stream": true, "messages": [{"role": "user", "content": "hi"}], '
             b'"tools": [' + b",".join([one] * (size // len(one))) + b"]}")
    answers = json.dumps({"model": "text-embedding-3-small", "input": ["x"] * 2000, "dimensions": 3072}).encode()
    return {
        "objects": ("/v1/chat/completions", objects, {}, 1),
        "numbers": ("/v1/embeddings", numbers, {}, 1),
        "strings": ("/v1/chat/completions", strings, {}, 1),
        "nesting": ("/v1/chat/completions", nesting, {}, 1),
        "tools": ("/v1/chat/completions", tools, {"x-fake-no-usage": "1"}, 1),
        "answers": ("/v1/embeddings", answers, {}, 4),
    }


def post(port: int, path: str, body: bytes, headers: dict[str, str]) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", path, body=body, headers={"content-type": "application/json", **headers})
    r = conn.getresponse()
    r.read()
    conn.close()
    return r.status


class Probe(threading.Thread):
    """Small chat calls back to back, each one's latency kept with the time it ended."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port, self.samples, self.stop = port, [], threading.Event()
        self.samples: list[tuple[float, float]] = []

    def run(self) -> None:
        while not self.stop.is_set():
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
            try:
                while not self.stop.is_set():
                    t = time.perf_counter()
                    conn.request("POST", "/v1/chat/completions", body=PROBE,
                                 headers={"content-type": "application/json"})
                    conn.getresponse().read()
                    self.samples.append((time.perf_counter(), time.perf_counter() - t))
            except OSError as e:  # counted as the time it took to fail; a new connection goes on
                self.samples.append((time.perf_counter(), time.perf_counter() - t))
                print(f"probe: {e!r}", file=sys.stderr)
            finally:
                conn.close()


def case(port: int, pid: int, probe: Probe, path: str, body: bytes, headers: dict[str, str], n: int
         ) -> dict[str, Any]:
    base_rss = rss_mb([pid], "VmRSS")
    start = time.perf_counter()
    statuses: list[int] = []
    senders = [threading.Thread(target=lambda: statuses.append(post(port, path, body, headers))) for _ in range(n)]
    for s in senders:
        s.start()
    peak = base_rss
    while any(s.is_alive() for s in senders):
        peak = max(peak, rss_mb([pid], "VmRSS"))
        time.sleep(0.01)
    end = time.perf_counter()
    during = [dt for t, dt in list(probe.samples) if start <= t <= end + 0.5]
    return {"statuses": sorted(statuses), "body_mib": round(len(body) / 2**20, 1), "at_once": n,
            "seconds": round(end - start, 2), "rss_added_mib": round(peak - base_rss, 1),
            "probe_max_ms": round(max(during, default=0) * 1000, 1),
            "probe_p99_ms": round(sorted(during)[int(len(during) * 0.99)] * 1000, 1) if during else None,
            "probe_calls": len(during)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=30)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "hostile_bodies.json")
    a = ap.parse_args()
    import subprocess

    tmp = Path(tempfile.mkdtemp(prefix="llmmeter-hostile-"))
    up_port, probe_port, port = free_port(), free_port(), free_port()
    ups = [subprocess.Popen([sys.executable, str(ROOT / "tests" / "fake_upstream.py"), "--port", str(p)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for p in (up_port, probe_port)]
    config = tmp / "llmmeter.toml"
    config.write_text(f'[[upstream]]\nname = "hostile"\nbase_url = "http://127.0.0.1:{up_port}/v1"\n\n'
                      f'[[upstream]]\nname = "probe"\nbase_url = "http://127.0.0.1:{probe_port}/v1"\n'
                      'models = ["probe-*"]\n')
    proxy = subprocess.Popen([sys.executable, "-m", "proxy", "serve", "--port", str(port), "--config", str(config),
                              "--db", str(tmp / "ledger.db")],
                             cwd=tmp, stdout=subprocess.DEVNULL, stderr=(tmp / "llmmeter.log").open("wb"))
    try:
        for p, proc in zip((up_port, probe_port), ups, strict=True):
            wait_up(p, proc)
        wait_up(port, proxy)
        for _ in range(50):
            post(port, "/v1/chat/completions", PROBE, {})
        probe = Probe(port)
        probe.start()
        time.sleep(2)
        rest = [dt for _, dt in probe.samples]
        results: dict[str, Any] = {"probe_p50_ms_at_rest": round(statistics.median(rest) * 1000, 2),
                                   "idle_rss_mib": round(rss_mb([proxy.pid], "VmRSS"), 1), "cases": {}}
        for name, (path, body, headers, n) in bodies(a.mb).items():
            if a.only and name not in a.only:
                continue
            results["cases"][name] = r = case(port, proxy.pid, probe, path, body, headers, n)
            print(f"{name:8} {r['body_mib']:6} MiB ×{n}  {r['statuses']}  +{r['rss_added_mib']} MiB RSS  "
                  f"probe max {r['probe_max_ms']} ms (p99 {r['probe_p99_ms']}, {r['probe_calls']} calls) "
                  f"in {r['seconds']} s", flush=True)
        probe.stop.set()
        print(f"probe p50 at rest {results['probe_p50_ms_at_rest']} ms; idle RSS {results['idle_rss_mib']} MiB")
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(results, indent=2) + "\n")
    finally:
        for proc in (proxy, *ups):
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
