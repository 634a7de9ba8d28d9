"""Relay benchmark: direct calls, two no-op relays, llmmeter and LiteLLM's proxy, side by side.

    python bench/relay.py [--requests 2000] [--duration 5] [--litellm auto|off] [--out bench/results/relay.json]

Starts, in one run and one process tree: the fake upstream (tests/fake_upstream.py, every
reply with usage, every stream with 30 content chunks), a no-op relay on llmmeter's own
stack (bench/noop_relay.py: "noop_relay" with llmmeter's own upstream client,
"noop_relay_aiohttp" the same relay on aiohttp's client), `llmmeter serve` with a fresh SQLite ledger and, when
bench/.venv-litellm holds it (`make bench-litellm`), LiteLLM's proxy with its prometheus
callback, all pricing kimi-k3.1-pro alike. For each path: sequential keep-alive latency
(non-streamed p50/p99), time to first byte of a stream, throughput with wrk (Debian
package `wrk`) at 1, 32 and 128 connections, streamed and not, the CPU seconds the path's
own processes spend per 1,000 requests, and their peak RSS (a 1 s wrk warm-up precedes the
throughput runs, so they measure steady state). Then a fresh llmmeter's RSS
under wrk at 128 connections before any token estimate, and after the estimates of the
requests wrk abandons when it stops (the first estimate loads the o200k vocabulary).
Ratios against direct and against LiteLLM, aiohttp's no-op relay against the own client's,
and the targets, go to the JSON file too.

"llmmeter_budgets" is the same `llmmeter serve` with an enforced `[[budget]]` over the whole
proxy (SPEC "Budgets (enforced)"), its limit so large that nothing is refused: every request
reserves its worst case from the replica's lease and settles it when imported. Against
"llmmeter" in the same run it shows what enforcing a budget costs: added p50 within 1 ms of
direct, throughput within 10% of llmmeter without budgets. Throughput on a shared machine
drifts between two runs minutes apart, so that comparison is also made in alternation
(`--budget-rounds`, default 5): wrk at 32 connections on llmmeter, then on llmmeter_budgets,
plain and streamed, each round; the median of the rounds' ratios is what the target checks.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import platform
import re
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LITELLM = ROOT / "bench" / ".venv-litellm" / "bin" / "litellm"
MODEL = "kimi-k3.1-pro"
MESSAGES = [{"role": "user", "content": "hello"}]
BODY = json.dumps({"model": MODEL, "messages": MESSAGES}).encode()
STREAM_BODY = json.dumps({"model": MODEL, "messages": MESSAGES, "stream": True}).encode()
# What the upstream does for every request, whoever relays it (LiteLLM forwards no x-fake-* header).
UPSTREAM_DEFAULTS = {"x-fake-usage": json.dumps({"prompt": 1200, "cached": 1000, "completion": 50}),
                     "x-fake-chunks": "30"}
CONNECTIONS = (1, 32, 128)
TCK = os.sysconf("SC_CLK_TCK")
# The speed floor (docs/decisions/upstream-client.md); peak RSS with tiktoken's o200k loaded
# by the first estimate (`[estimate] engine = "compact"` stays under 80 MB).
TARGETS = {"added_p50_ms": 1.0, "added_p99_ms": 5.0, "added_stream_ttfb_ms": 1.0, "rps_32_vs_direct": 0.4,
           "rps_32_stream_vs_direct": 0.4, "peak_rss_mb": 200.0, "peak_rss_mb_before_any_estimate": 80.0,
           "budgets_added_p50_ms": 1.0, "budgets_rps_32_vs_no_budgets": 0.9,
           "budgets_rps_32_stream_vs_no_budgets": 0.9}
# An enforced budget over every request, too large to refuse any (MAX_BUDGET_USD is 10^7).
BUDGET_CONFIG = """[[budget]]
name = "bench"
limit_usd = "1000000"
period = "month"
mode = "enforce"
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_up(port: int, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the process for port {port} exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/v1/models")
            c.getresponse().read()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"port {port} did not come up")


def sequential(port: int, n: int, body: bytes, headers: dict[str, str], first_byte: bool = False) -> list[float]:
    """Per-request seconds over one keep-alive connection, after a warm-up."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    times = []
    warm = min(50, n)
    for i in range(n + warm):
        t = time.perf_counter()
        conn.request("POST", "/v1/chat/completions", body=body, headers=headers)
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
    """pid and all its descendants (workers, LiteLLM's children)."""
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
    total = 0.0
    for p in pids:
        try:
            f = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(f[11]) + int(f[12])) / TCK
    return total


def rss_mb(pids: list[int], field: str = "VmHWM") -> float:
    """Peak RSS (VmHWM), or with field="VmRSS" the current one, summed over the processes that serve."""
    total = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith(field + ":"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def rss_probe(cmd: list[str], port: int, env: dict[str, str], cwd: Path, a: argparse.Namespace,
              headers: dict[str, str]) -> dict[str, float]:
    """A fresh llmmeter under wrk at 128 connections, RSS sampled every 50 ms. Until wrk stops,
    every request reports usage, so nothing is estimated; at its stop wrk abandons the
    requests in flight, which are estimated (client_closed) and load the o200k vocabulary."""
    import threading

    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_up(port, proc)
        pids, samples, stop = tree(proc.pid), [], threading.Event()

        def sample() -> None:
            while not stop.wait(0.05):
                samples.append(rss_mb(pids, "VmRSS"))

        before = rss_mb(pids, "VmRSS")
        t = threading.Thread(target=sample)
        t.start()
        threading.Timer(a.duration - 0.3, stop.set).start()  # stop sampling just before wrk stops
        wrk(port, a.duration, 128, False, headers, pids)
        t.join()
        time.sleep(2)  # the abandoned requests' estimates
        return {"idle_mb": before, "under_load_before_any_estimate_mb": max(samples, default=before),
                "after_first_estimates_mb": rss_mb(pids, "VmRSS"), "peak_mb": rss_mb(pids)}
    finally:
        proc.terminate()
        proc.wait(20)


def wrk(port: int, duration: int, connections: int, stream: bool, headers: dict[str, str],
        pids: list[int]) -> dict[str, Any] | None:
    if shutil.which("wrk") is None:
        return None
    body = (STREAM_BODY if stream else BODY).decode()
    hdrs = "".join(f'wrk.headers["{k}"] = {json.dumps(v)}\n' for k, v in headers.items())
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(f'wrk.method = "POST"\nwrk.body = {json.dumps(body)}\n{hdrs}')
    before = cpu_s(pids)
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--timeout", "30s", "-s",
                          script.name, f"http://127.0.0.1:{port}/v1/chat/completions"],
                         capture_output=True, text=True).stdout
    spent = cpu_s(pids) - before
    os.unlink(script.name)
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    n = re.search(r"(\d+) requests in", out)
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m is None or n is None:
        return None
    requests = int(n.group(1))
    return {"rps": float(m.group(1)), "requests": requests, "non_2xx": int(bad.group(1)) if bad else 0,
            "socket_errors": sum(int(x) for x in errors.groups()) if errors else 0,
            "cpu_s_per_1000": spent / requests * 1000 if requests else None}


def litellm_config(tmp: Path, upstream_port: int, master_key: str) -> Path:
    # Same model, same prices as pricing/tables (USD per token), prometheus callback on.
    cfg = tmp / "litellm.yaml"
    cfg.write_text(f"""model_list:
  - model_name: {MODEL}
    litellm_params:
      model: openai/{MODEL}
      api_base: http://127.0.0.1:{upstream_port}/v1
      api_key: sk-bench-upstream
    model_info:
      input_cost_per_token: 0.000002
      output_cost_per_token: 0.00001
      cache_read_input_token_cost: 0.0000002
litellm_settings:
  callbacks: ["prometheus"]
  telemetry: false
general_settings:
  master_key: {master_key}
""")
    return cfg


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("llmmeter", "uvicorn", "uvloop", "httptools", "orjson", "prometheus-client", "aiohttp"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[pkg] = metadata.version(pkg)
    wrk_v = subprocess.run(["wrk", "-v"], capture_output=True, text=True) if shutil.which("wrk") else None
    if wrk_v is not None:
        out["wrk"] = (wrk_v.stdout + wrk_v.stderr).split("\n")[0].strip()
    if LITELLM.exists():
        pip = subprocess.run([str(LITELLM.parent / "python"), "-c",
                              "import importlib.metadata as m; print(m.version('litellm'))"],
                             capture_output=True, text=True)
        out["litellm"] = pip.stdout.strip()
    return out


def measure(name: str, port: int, pids: list[int], a: argparse.Namespace, headers: dict[str, str]) -> dict[str, Any]:
    slow = name == "litellm"  # ~30 ms a call: fewer sequential calls keep the run short
    n = min(a.requests, 300) if slow else a.requests
    print(f"  {name}: sequential", file=sys.stderr)
    lat = sequential(port, n, BODY, headers)
    ttfb = sequential(port, max(100, n // 4), STREAM_BODY, headers, first_byte=True)
    r: dict[str, Any] = {"p50_ms": statistics.median(lat) * 1000, "p99_ms": pct(lat, 0.99) * 1000,
                         "stream_ttfb_p50_ms": statistics.median(ttfb) * 1000, "sequential_requests": n,
                         # Before wrk: no request was abandoned yet, so llmmeter has estimated nothing
                         # (an estimate loads the o200k vocabulary: 8 MB compact, 43 MB with tiktoken).
                         "peak_rss_mb_sequential": rss_mb(tree(pids[0]))}
    # Warm-up, for every path alike: the requests wrk abandons when it stops are estimated, and
    # llmmeter's first estimate loads the vocabulary (~0.7 s of CPU, once per process). Left to
    # the first measured run, that one-off cost would land inside it; throughput is steady state.
    wrk(port, 1, 32, False, headers, tree(pids[0]))
    time.sleep(2)
    for stream in (False, True):
        for c in CONNECTIONS:
            print(f"  {name}: wrk {c} connections{' streamed' if stream else ''}", file=sys.stderr)
            r[f"wrk_{c}{'_stream' if stream else ''}"] = wrk(port, a.duration, c, stream, headers, tree(pids[0]))
    r["peak_rss_mb"] = rss_mb(tree(pids[0]))
    return r


def rps(r: dict[str, Any], key: str) -> float | None:
    w = r.get(key)
    return w["rps"] if w else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--litellm", choices=("auto", "off"), default="auto")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "relay.json")
    ap.add_argument("--budget-rounds", type=int, default=5,
                    help="alternated wrk rounds, llmmeter with and without an enforced budget")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="llmmeter-bench-"))
    up, noop, noop_aio, meter, lite = free_port(), free_port(), free_port(), free_port(), free_port()
    budgets = free_port()
    py = sys.executable
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLMMETER_", "PROMETHEUS_MULTIPROC"))}
    defaults = [x for k, v in UPSTREAM_DEFAULTS.items() for x in ("--default", f"{k}={v}")]
    master_key = "sk-" + secrets.token_urlsafe(32)
    headers = {"content-type": "application/json", "authorization": f"Bearer {master_key}"}
    quiet: dict[str, Any] = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs: dict[str, tuple[subprocess.Popen[bytes], int]] = {
        "direct": (subprocess.Popen([py, str(ROOT / "tests" / "fake_upstream.py"), "--port", str(up), *defaults],
                                    env=env), up),
        "noop_relay": (subprocess.Popen([py, str(ROOT / "bench" / "noop_relay.py"), "--upstream",
                                         f"http://127.0.0.1:{up}", "--port", str(noop), "--client", "own"],
                                        env=env), noop),
        "noop_relay_aiohttp": (subprocess.Popen([py, str(ROOT / "bench" / "noop_relay.py"), "--upstream",
                                                 f"http://127.0.0.1:{up}", "--port", str(noop_aio), "--client",
                                                 "aiohttp"], env=env), noop_aio),
        "llmmeter": (subprocess.Popen([py, "-m", "proxy", "serve", "--port", str(meter), "--upstream",
                                       f"http://127.0.0.1:{up}/v1", "--db", f"sqlite:///{tmp}/bench.db"],
                                      env=env, cwd=tmp, **quiet), meter),
        "llmmeter_budgets": (subprocess.Popen([py, "-m", "proxy", "serve", "--port", str(budgets), "--upstream",
                                               f"http://127.0.0.1:{up}/v1", "--db", f"sqlite:///{tmp}/budgets.db",
                                               "--config", str(budget_config(tmp))],
                                              env=env, cwd=tmp, **quiet), budgets),
    }
    litellm_note = None
    if a.litellm == "auto" and LITELLM.exists():
        lenv = {**env, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR", "NO_DOCS": "True"}
        procs["litellm"] = (subprocess.Popen([str(LITELLM), "--config", str(litellm_config(tmp, up, master_key)),
                                              "--host", "127.0.0.1", "--port", str(lite), "--num_workers", "1"],
                                             env=lenv, cwd=tmp, **quiet), lite)
    elif a.litellm == "auto":
        litellm_note = f"not measured: {LITELLM} is missing (make bench-litellm installs it)"
    load_start = os.getloadavg()
    try:
        for proc, port in procs.values():
            wait_up(port, proc)
        results: dict[str, Any] = {
            "command": " ".join(["python", "bench/relay.py", *sys.argv[1:]]),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_avg_start": load_start},
            "versions": versions(), "upstream": UPSTREAM_DEFAULTS, "paths": {}}
        if litellm_note:
            results["litellm"] = litellm_note
        for name, (proc, port) in procs.items():
            results["paths"][name] = measure(name, port, [proc.pid], a, headers)
        results["budgets_alternated"] = alternated(procs["llmmeter"], procs["llmmeter_budgets"], a, headers)
        probe = free_port()
        print("  llmmeter: RSS under load before any estimate", file=sys.stderr)
        results["paths"]["llmmeter"]["rss_probe"] = rss_probe(
            [py, "-m", "proxy", "serve", "--port", str(probe), "--upstream", f"http://127.0.0.1:{up}/v1",
             "--db", f"sqlite:///{tmp}/probe.db"], probe, env, tmp, a, headers)
        results["machine"]["load_avg_end"] = os.getloadavg()
        summarize(results, tmp / "bench.db", tmp / "budgets.db")
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(results, indent=2))
        report(results)
        print(f"wrote {a.out}")
    finally:
        for proc, _ in procs.values():
            proc.terminate()
        for proc, _ in procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def alternated(plain: tuple[subprocess.Popen[bytes], int], budgets: tuple[subprocess.Popen[bytes], int],
               a: argparse.Namespace, headers: dict[str, str]) -> dict[str, Any]:
    """wrk at 32 connections on llmmeter then llmmeter_budgets, round after round: both see the
    same machine, so the ratio of each round is fair even when the load around them drifts."""
    rounds: list[dict[str, Any]] = []
    for i in range(a.budget_rounds):
        for stream in (False, True):
            print(f"  budgets alternated: round {i + 1}{' streamed' if stream else ''}", file=sys.stderr)
            w = {name: wrk(port, a.duration, 32, stream, headers, tree(proc.pid))
                 for name, (proc, port) in (("llmmeter", plain), ("llmmeter_budgets", budgets))}
            if all(w.values()):
                rounds.append({"stream": stream, **w})
    out: dict[str, Any] = {"rounds": rounds}
    for stream in (False, True):
        mine = [r for r in rounds if r["stream"] is stream]
        key = "stream" if stream else "plain"
        out[f"{key}_rps_ratio_median"] = statistics.median(
            r["llmmeter_budgets"]["rps"] / r["llmmeter"]["rps"] for r in mine) if mine else None
        out[f"{key}_cpu_ratio_median"] = statistics.median(
            r["llmmeter_budgets"]["cpu_s_per_1000"] / r["llmmeter"]["cpu_s_per_1000"] for r in mine) if mine else None
    return out


def budget_config(tmp: Path) -> Path:
    path = tmp / "budgets.toml"
    path.write_text(BUDGET_CONFIG)
    return path


def ledger_rows(db: Path) -> dict[str, int]:
    import sqlite3

    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT outcome, usage_source, count(*) FROM requests GROUP BY 1, 2").fetchall()
    return {f"{outcome}/{source}": n for outcome, source, n in rows}


def budgets_vs(b: dict[str, Any], m: dict[str, Any], d: dict[str, Any]) -> dict[str, Any]:
    """llmmeter with an enforced budget against llmmeter without (same run) and against direct."""
    out: dict[str, Any] = {"added_p50_ms": b["p50_ms"] - d["p50_ms"], "added_p99_ms": b["p99_ms"] - d["p99_ms"],
                           "added_stream_ttfb_ms": b["stream_ttfb_p50_ms"] - d["stream_ttfb_p50_ms"],
                           "p50_ms_vs_no_budgets": b["p50_ms"] - m["p50_ms"],
                           "p99_ms_vs_no_budgets": b["p99_ms"] - m["p99_ms"]}
    for key in ("wrk_1", "wrk_32", "wrk_128", "wrk_1_stream", "wrk_32_stream", "wrk_128_stream"):
        rb, rm = rps(b, key), rps(m, key)
        out[f"{key}_rps_vs_no_budgets"] = rb / rm if rb and rm else None
        cb, cm = ((r.get(key) or {}).get("cpu_s_per_1000") for r in (b, m))
        out[f"{key}_cpu_s_per_1000_vs_no_budgets"] = cb / cm if cb and cm else None
    return out


def summarize(results: dict[str, Any], db: Path, budgets_db: Path) -> None:
    paths = results["paths"]
    d, m = paths["direct"], paths["llmmeter"]
    added = {"added_p50_ms": m["p50_ms"] - d["p50_ms"], "added_p99_ms": m["p99_ms"] - d["p99_ms"],
             "added_stream_ttfb_ms": m["stream_ttfb_p50_ms"] - d["stream_ttfb_p50_ms"]}
    ratios: dict[str, Any] = {}
    for key in ("wrk_1", "wrk_32", "wrk_128", "wrk_1_stream", "wrk_32_stream", "wrk_128_stream"):
        md, mm = rps(d, key), rps(m, key)
        ratios[f"{key}_llmmeter_vs_direct"] = mm / md if md and mm else None
        if "litellm" in paths:
            ml = rps(paths["litellm"], key)
            ratios[f"{key}_llmmeter_vs_litellm"] = mm / ml if ml and mm else None
    if "litellm" in paths:
        lp = paths["litellm"]
        ratios["p50_litellm_vs_llmmeter"] = lp["p50_ms"] / m["p50_ms"]
    results["llmmeter_added"] = added
    results["ratios"] = ratios
    results["noop_added"] = {
        name: {"added_p50_ms": paths[name]["p50_ms"] - d["p50_ms"], "added_p99_ms": paths[name]["p99_ms"] - d["p99_ms"],
               "added_stream_ttfb_ms": paths[name]["stream_ttfb_p50_ms"] - d["stream_ttfb_p50_ms"]}
        for name in ("noop_relay", "noop_relay_aiohttp")}
    results["noop_aiohttp_vs_noop_own"] = client_ratios(paths["noop_relay_aiohttp"], paths["noop_relay"])
    checks = {"added_p50_ms": added["added_p50_ms"], "added_p99_ms": added["added_p99_ms"],
              "added_stream_ttfb_ms": added["added_stream_ttfb_ms"],
              "rps_32_vs_direct": ratios["wrk_32_llmmeter_vs_direct"],
              "rps_32_stream_vs_direct": ratios["wrk_32_stream_llmmeter_vs_direct"],
              "peak_rss_mb": m["peak_rss_mb"],
              "peak_rss_mb_before_any_estimate": m["rss_probe"]["under_load_before_any_estimate_mb"]}
    bud = results["budgets_vs"] = budgets_vs(paths["llmmeter_budgets"], m, d)
    alt = results.get("budgets_alternated") or {}
    checks.update({"budgets_added_p50_ms": bud["added_p50_ms"],
                   "budgets_rps_32_vs_no_budgets": alt.get("plain_rps_ratio_median") or bud["wrk_32_rps_vs_no_budgets"],
                   "budgets_rps_32_stream_vs_no_budgets":
                       alt.get("stream_rps_ratio_median") or bud["wrk_32_stream_rps_vs_no_budgets"]})
    results["targets"] = {
        k: {"value": v, "target": TARGETS[k],
            "met": None if v is None else (v >= TARGETS[k] if "rps" in k else v <= TARGETS[k])}
        for k, v in checks.items()}
    time.sleep(1)  # let the importer catch up
    results["llmmeter_ledger_rows"] = ledger_rows(db)
    # Every request admitted: none refused, none rejected for want of the database.
    results["llmmeter_budgets_ledger_rows"] = ledger_rows(budgets_db)


def client_ratios(aio: dict[str, Any], own: dict[str, Any]) -> dict[str, float | None]:
    """aiohttp's no-op relay over the own client's: rps (below 1: aiohttp is slower), latency and
    CPU per request (above 1: aiohttp costs more)."""
    out: dict[str, float | None] = {}
    for key in ("p50_ms", "p99_ms", "stream_ttfb_p50_ms"):
        out[key] = aio[key] / own[key] if own[key] else None
    for key in ("wrk_1", "wrk_32", "wrk_128", "wrk_1_stream", "wrk_32_stream", "wrk_128_stream"):
        ra, ro = rps(aio, key), rps(own, key)
        out[f"{key}_rps"] = ra / ro if ra and ro else None
        ca, co = ((r.get(key) or {}).get("cpu_s_per_1000") for r in (aio, own))
        out[f"{key}_cpu_s_per_1000"] = ca / co if ca and co else None
    return out


def report(results: dict[str, Any]) -> None:
    print(f"{'path':<18} {'p50 ms':>7} {'p99 ms':>7} {'TTFB ms':>7} {'rps@1':>7} {'rps@32':>7} {'rps@128':>7} "
          f"{'s@1':>6} {'s@32':>6} {'s@128':>6} {'cpu s/1k':>8} {'RSS MB':>6}")
    for name, r in results["paths"].items():
        cpu = (r.get("wrk_32") or {}).get("cpu_s_per_1000")
        print(f"{name:<18} {r['p50_ms']:7.3f} {r['p99_ms']:7.3f} {r['stream_ttfb_p50_ms']:7.3f} "
              + " ".join(f"{rps(r, k) or 0:7.0f}" for k in ("wrk_1", "wrk_32", "wrk_128"))
              + " " + " ".join(f"{rps(r, k) or 0:6.0f}" for k in ("wrk_1_stream", "wrk_32_stream", "wrk_128_stream"))
              + f" {cpu or 0:8.3f} {r['peak_rss_mb']:6.0f} ({r['peak_rss_mb_sequential']:.0f} before wrk)")
    for k, t in results["targets"].items():
        v = t["value"]
        print(f"  {k:<24} {'n/a' if v is None else f'{v:.3f}':>8}  target {t['target']}  "
              f"{'met' if t['met'] else 'NOT met'}")
    for name, added in results["noop_added"].items():
        print(f"  {name} added: p50 {added['added_p50_ms']:.3f} ms, p99 {added['added_p99_ms']:.3f} ms, "
              f"stream TTFB {added['added_stream_ttfb_ms']:.3f} ms")
    ratio = results["noop_aiohttp_vs_noop_own"]
    print("  noop_aiohttp/noop_own: " + ", ".join(
        f"{k} {'n/a' if v is None else f'{v:.2f}'}"
        for k, v in ratio.items() if k in ("p50_ms", "wrk_1_rps", "wrk_32_rps", "wrk_128_rps", "wrk_32_stream_rps",
                                          "wrk_1_cpu_s_per_1000", "wrk_32_cpu_s_per_1000", "wrk_128_cpu_s_per_1000")))
    bud = results["budgets_vs"]
    print(f"  llmmeter_budgets vs llmmeter: p50 {bud['p50_ms_vs_no_budgets']:+.3f} ms, p99 "
          f"{bud['p99_ms_vs_no_budgets']:+.3f} ms; rps " + ", ".join(
              f"{k.removesuffix('_rps_vs_no_budgets')} {'n/a' if v is None else f'{v:.3f}'}"
              for k, v in bud.items() if k.endswith("_rps_vs_no_budgets")))
    alt = results.get("budgets_alternated") or {}
    if alt.get("rounds"):
        print("  alternated at 32 connections, llmmeter_budgets/llmmeter medians: " + ", ".join(
            f"{k.removesuffix('_median')} {v:.3f}" for k, v in alt.items() if k.endswith("_median") and v))
    probe = results["paths"]["llmmeter"]["rss_probe"]
    print(f"llmmeter RSS (fresh process, wrk 128 connections): idle {probe['idle_mb']:.0f} MB, under load "
          f"{probe['under_load_before_any_estimate_mb']:.0f} MB, after its first estimates "
          f"{probe['after_first_estimates_mb']:.0f} MB, peak {probe['peak_mb']:.0f} MB")
    print(f"llmmeter_budgets ledger rows: {results['llmmeter_budgets_ledger_rows']}")
    print(f"llmmeter ledger rows: {results['llmmeter_ledger_rows']}; load average "
          f"{results['machine']['load_avg_start']} -> {results['machine']['load_avg_end']}")


if __name__ == "__main__":
    main()
