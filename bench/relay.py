"""Relay benchmark: direct calls, nginx, llmmeter, its no-op relays and other LLM gateways, side by side.

    python bench/relay.py [--paths direct,nginx,...] [--rounds 3] [--requests 2000] [--duration 5]
                          [--out bench/results/relay.json]
    python bench/relay.py --markdown [--out bench/results/relay.json]   # the docs tables from a run

Starts, in one run and one process tree, the fake upstream (tests/fake_upstream.py: every
reply with usage, every stream with 30 content chunks) and, in front of it, each path
(PATHS below; `--paths` picks some):

- direct: the fake upstream itself;
- nginx: Debian's nginx as a plain reverse proxy (one worker, keep-alive upstream,
  `proxy_buffering off` so streams flow), the limit for a relay here;
- floor_relay: the least a relay in Python can do, bytes in and out on uvloop and httptools
  with no ASGI and nothing read but the framing (bench/floor_relay.py);
- noop_relay / noop_relay_aiohttp: a relay that meters nothing on llmmeter's own stack
  (bench/noop_relay.py) with llmmeter's upstream client / aiohttp's;
- llmmeter: `llmmeter serve` on a fresh SQLite ledger, metering, ledger and metrics on;
- llmmeter_budgets: the same with an enforced `[[budget]]` too large to refuse anything;
- tensorzero: TensorZero's Rust gateway from its wheel (bench/.venv-tensorzero), offline,
  one model routed to the fake upstream as an OpenAI-compatible provider;
- portkey: Portkey's gateway from npm (bench/portkey, pinned by its package-lock.json);
- litellm: LiteLLM's proxy (bench/.venv-litellm) with its prometheus callback.

`make bench-peers` installs nginx, TensorZero and Portkey; `make bench-litellm` LiteLLM.
A path whose parts are missing, or that does not relay correctly, is reported as skipped
with the reason. Before any timing, each path is checked: a plain request answers 200 with
the upstream's usage, a stream answers 200 with all 30 content chunks and ends with
[DONE], and a slowed stream (20 ms between events) reaches the client as it is produced,
not at its end.

For each path: sequential keep-alive latency (non-streamed p50/p99, added over direct) and
a stream's time to first byte; throughput with wrk (Debian package `wrk`) at 1, 32 and 128
connections, streamed and not; the CPU seconds the path's own processes (with their
children: nginx's workers, node, the gateway's threads) spend per 1,000 requests, from
/proc; their peak RSS. The machine is shared and drifts, so every measurement goes in
rounds (`--rounds`): each wrk configuration runs on every path in turn, round after
round, and the median of the rounds is reported; ratios between two paths are the median
of the rounds' ratios. wrk's non-2xx answers and socket errors are counted; a run with
non-2xx answers is flagged and left out of the ratios.

Then a fresh llmmeter's RSS under wrk at 128 connections before any token estimate, and
after the estimates of the requests wrk abandons when it stops (the first estimate loads
the o200k vocabulary). The targets (TARGETS) with met / not met go to the JSON file.
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
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from procs import Proc, Skip, cpu_s, free_port, keepalive_seconds, pct, rss_mb, tree, wait_up

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
LITELLM = BENCH / ".venv-litellm" / "bin" / "litellm"
TENSORZERO_PY = BENCH / ".venv-tensorzero" / "bin" / "python"
PORTKEY = BENCH / "portkey" / "node_modules" / "@portkey-ai" / "gateway"
MODEL = "kimi-k3.1-pro"
MESSAGES = [{"role": "user", "content": "hello"}]
CHAT = "/v1/chat/completions"
# What the upstream does for every request, whoever relays it (not every gateway forwards x-fake-* headers).
USAGE = {"prompt": 1200, "cached": 1000, "completion": 50}
CHUNKS = 30
UPSTREAM_DEFAULTS = {"x-fake-usage": json.dumps(USAGE), "x-fake-chunks": str(CHUNKS)}
# The slow upstream of the streaming check: 20 ms between events, ~0.6 s a stream.
SLOW_DELAY_MS = 20
CONNECTIONS = (1, 32, 128)
WRK_KEYS = tuple(f"wrk_{c}{s}" for s in ("", "_stream") for c in CONNECTIONS)
PATHS = ("direct", "nginx", "floor_relay", "noop_relay", "noop_relay_aiohttp", "llmmeter", "llmmeter_budgets",
         "tensorzero", "portkey", "litellm")
# (comparison, bound). The speed floor (docs/decisions/upstream-client.md); peak RSS with
# tiktoken's o200k loaded by the first estimate (`[estimate] engine = "compact"` stays under
# 80 MB); what an enforced budget may cost; and against the peers: llmmeter's CPU per
# non-streamed request (wrk, 32 connections) at most twice nginx's, its throughput at 32
# connections at least 65% of direct, and ahead of TensorZero's gateway on both.
TARGETS: dict[str, tuple[str, float]] = {
    "added_p50_ms": ("<=", 1.0), "added_p99_ms": ("<=", 5.0), "added_stream_ttfb_ms": ("<=", 1.0),
    "rps_32_vs_direct": (">=", 0.65), "rps_32_stream_vs_direct": (">=", 0.4),
    "cpu_per_request_vs_nginx": ("<=", 2.0),
    "cpu_per_request_vs_tensorzero": ("<", 1.0), "rps_32_vs_tensorzero": (">", 1.0),
    "peak_rss_mb": ("<=", 200.0), "peak_rss_mb_before_any_estimate": ("<=", 80.0),
    "budgets_added_p50_ms": ("<=", 1.0), "budgets_rps_32_vs_no_budgets": (">=", 0.9),
    "budgets_rps_32_stream_vs_no_budgets": (">=", 0.9)}
# An enforced budget over every request, too large to refuse any (MAX_BUDGET_USD is 10^7).
BUDGET_CONFIG = """[[budget]]
name = "bench"
limit_usd = "1000000"
period = "month"
mode = "enforce"
"""
@dataclass
class Route:
    """Where and how a path takes a chat completion."""

    port: int
    url: str = CHAT
    model: str = MODEL
    headers: dict[str, str] = field(default_factory=dict)

    def body(self, stream: bool) -> bytes:
        return json.dumps({"model": self.model, "messages": MESSAGES, **({"stream": True} if stream else {})}).encode()


@dataclass
class Peer:
    name: str
    route: Route
    slow: Route  # the same path in front of the slow upstream (the streaming check)
    procs: list[Proc]
    headers: dict[str, str] = field(default_factory=dict)  # the client's (content type, master key), set by main

    def pids(self) -> list[int]:
        return [p for proc in self.procs for p in tree(proc.pid)]


@dataclass
class Ctx:
    """What every starter needs."""

    tmp: Path
    env: dict[str, str]
    up: int
    slow_up: int
    master_key: str
    quiet: bool = True
    all_procs: list[Proc] = field(default_factory=list)

    def popen(self, cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> Proc:
        out = subprocess.DEVNULL if self.quiet else None
        proc = subprocess.Popen(cmd, env=env or self.env, cwd=cwd or self.tmp, stdout=out, stderr=out)
        self.all_procs.append(proc)
        return proc


def post(route: Route, headers: dict[str, str], stream: bool, timeout: float = 30) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", route.port, timeout=timeout)
    conn.request("POST", route.url, body=route.body(stream), headers={**headers, **route.headers})
    return conn.getresponse()


def verify(peer: Peer) -> dict[str, Any]:
    """The path relays correctly, or Skip: a path that answers errors fast must not look fast."""
    r = post(peer.route, peer.headers, False)
    raw = r.read()
    if r.status != 200:
        raise Skip(f"a plain request answered {r.status}: {raw[:300]!r}")
    usage = (json.loads(raw).get("usage") or {})
    if (usage.get("prompt_tokens"), usage.get("completion_tokens")) != (USAGE["prompt"], USAGE["completion"]):
        raise Skip(f"a plain reply lacks the upstream's usage: {raw[:300]!r}")
    r = post(peer.route, peer.headers, True)
    raw = r.read()
    if r.status != 200:
        raise Skip(f"a stream answered {r.status}: {raw[:300]!r}")
    events = [line[5:].strip() for line in raw.decode().splitlines() if line.startswith("data:")]
    content = sum(1 for e in events if e != "[DONE]" and _delta_content(e))
    if not events or events[-1] != "[DONE]":
        raise Skip(f"a stream does not end with [DONE]: ...{raw[-300:]!r}")
    if content != CHUNKS:
        raise Skip(f"a stream carried {content} content chunks, not {CHUNKS}")
    flow = stream_flow(peer.slow, peer.headers)
    if flow["total_s"] < CHUNKS * SLOW_DELAY_MS / 1000 * 0.8:
        raise Skip(f"the slowed stream took {flow['total_s']:.3f} s: the slow upstream was not reached")
    if flow["first_content_s"] > flow["total_s"] / 2:
        raise Skip(f"the stream is buffered: its first content came after {flow['first_content_s']:.3f} s "
                   f"of {flow['total_s']:.3f} s")
    return {"stream_events": len(events), "stream_content_chunks": content, "slowed_stream": flow}


def _delta_content(event: str) -> bool:
    with contextlib.suppress(ValueError, AttributeError, IndexError, TypeError):
        return bool(json.loads(event)["choices"][0]["delta"].get("content"))
    return False


def stream_flow(route: Route, headers: dict[str, str]) -> dict[str, Any]:
    """A slowed stream's first content chunk and its end, in seconds from the request, and how
    many reads it arrived in."""
    t0 = time.perf_counter()
    r = post(route, headers, True)
    if r.status != 200:
        raise Skip(f"the slowed stream answered {r.status}: {r.read()[:300]!r}")
    buf, first, reads = b"", None, 0
    while chunk := r.read1(65536):
        reads += 1
        buf += chunk
        if first is None and b'"content":"tok' in buf.replace(b'": "', b'":"'):
            first = time.perf_counter() - t0
    total = time.perf_counter() - t0
    if b"[DONE]" not in buf:
        raise Skip("the slowed stream does not end with [DONE]")
    return {"first_content_s": first if first is not None else total, "total_s": total, "reads": reads}


def sequential(peer: Peer, n: int, stream: bool) -> list[float]:
    """Per-request seconds over one keep-alive connection, after a warm-up; a stream's to its first byte."""
    return keepalive_seconds(peer.route.port, peer.route.url, n, peer.route.body(stream),
                             {**peer.headers, **peer.route.headers}, first_byte=stream)


def wrk(peer: Peer, duration: int, connections: int, stream: bool) -> dict[str, Any] | None:
    if shutil.which("wrk") is None:
        return None
    body = peer.route.body(stream).decode()
    headers = {**peer.headers, **peer.route.headers}
    hdrs = "".join(f'wrk.headers["{k}"] = {json.dumps(v)}\n' for k, v in headers.items())
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(f'wrk.method = "POST"\nwrk.body = {json.dumps(body)}\n{hdrs}')
    pids = peer.pids()
    before = cpu_s(pids)
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--timeout", "30s", "-s",
                          script.name, f"http://127.0.0.1:{peer.route.port}{peer.route.url}"],
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


# --- the paths -------------------------------------------------------------------------------

def start_direct(c: Ctx) -> Peer:
    return Peer("direct", Route(c.up), Route(c.slow_up), [])  # the upstreams are started (and waited for) by main


def start_nginx(c: Ctx) -> Peer:
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if nginx is None:
        raise Skip("no nginx (make bench-peers installs Debian's nginx-light when run as root)")
    port, slow = free_port(), free_port()
    d = c.tmp / "nginx"
    d.mkdir()
    servers = ""
    for name, listen, target in (("fast", port, c.up), ("slow", slow, c.slow_up)):
        servers += f"""
    upstream {name} {{ server 127.0.0.1:{target}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{listen};
        location / {{
            proxy_pass http://{name};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
        }}
    }}"""
    conf = d / "nginx.conf"
    # One worker: llmmeter serves from one process by default, so both get one core's worth.
    conf.write_text(f"""daemon off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    keepalive_requests 1000000;
{servers}
}}
""")
    proc = c.popen([nginx, "-p", str(d), "-c", str(conf)])
    return Peer("nginx", Route(port), Route(slow), [proc])


def start_noop(c: Ctx, client: str) -> Peer:
    port = free_port()
    proc = c.popen([sys.executable, str(BENCH / "noop_relay.py"), "--upstream", f"http://127.0.0.1:{c.up}",
                    "--port", str(port), "--client", client])
    name = "noop_relay" if client == "own" else "noop_relay_aiohttp"
    # llmmeter's stack forwards the x-fake-* headers: the slowed stream is the same upstream, asked to wait.
    return Peer(name, Route(port), Route(port, headers={"x-fake-delay-ms": str(SLOW_DELAY_MS)}), [proc])


def start_floor(c: Ctx) -> Peer:
    port = free_port()
    proc = c.popen([sys.executable, str(BENCH / "floor_relay.py"), "--upstream-port", str(c.up), "--port", str(port)])
    # The request goes byte for byte: the slowed stream is the same upstream, asked to wait.
    return Peer("floor_relay", Route(port), Route(port, headers={"x-fake-delay-ms": str(SLOW_DELAY_MS)}), [proc])


def start_llmmeter(c: Ctx, budgets: bool) -> Peer:
    port = free_port()
    name = "llmmeter_budgets" if budgets else "llmmeter"
    cmd = [sys.executable, "-m", "proxy", "serve", "--port", str(port), "--upstream", f"http://127.0.0.1:{c.up}/v1",
           "--db", f"sqlite:///{c.tmp}/{name}.db"]
    if budgets:
        cfg = c.tmp / "budgets.toml"
        cfg.write_text(BUDGET_CONFIG)
        cmd += ["--config", str(cfg)]
    proc = c.popen(cmd)
    return Peer(name, Route(port), Route(port, headers={"x-fake-delay-ms": str(SLOW_DELAY_MS)}), [proc])


def start_tensorzero(c: Ctx) -> Peer:
    if not TENSORZERO_PY.exists():
        raise Skip(f"{TENSORZERO_PY} is missing (make bench-peers installs it)")
    d = c.tmp / "tensorzero"
    d.mkdir()
    models = ""
    for name, target in ((MODEL, c.up), ("kimi-slow", c.slow_up)):
        models += f"""
[models."{name}"]
routing = ["fake"]

[models."{name}".providers.fake]
type = "openai"
api_base = "http://127.0.0.1:{target}/v1/"
model_name = "{MODEL}"
api_key_location = "none"
"""
    conf = d / "tensorzero.toml"
    # Observability off: no ClickHouse, nothing recorded per call (TensorZero's choice without one).
    conf.write_text(f"[gateway]\nobservability.enabled = false\n{models}")
    url_file = d / "url"
    env = {**c.env, "RUST_LOG": "error"}
    proc = c.popen([str(TENSORZERO_PY), str(BENCH / "tensorzero_gateway.py"), str(conf), str(url_file)], env=env)
    deadline = time.monotonic() + 60
    while not url_file.exists():
        if proc.poll() is not None:
            raise Skip(f"the gateway exited with {proc.returncode} on start")
        if time.monotonic() > deadline:
            raise Skip("the gateway gave no address within 60 s")
        time.sleep(0.1)
    m = re.fullmatch(r"http://127\.0\.0\.1:(\d+)(/.*)", url_file.read_text().strip().rstrip("/"))
    if m is None:
        raise Skip(f"unexpected gateway address {url_file.read_text()!r}")
    port, base = int(m.group(1)), m.group(2)
    return Peer("tensorzero", Route(port, f"{base}/chat/completions", f"tensorzero::model_name::{MODEL}"),
                Route(port, f"{base}/chat/completions", "tensorzero::model_name::kimi-slow"), [proc])


def start_portkey(c: Ctx) -> Peer:
    server = PORTKEY / "build" / "start-server.js"
    if not server.exists():
        raise Skip(f"{server} is missing (make bench-peers installs it)")
    node = shutil.which("node")
    if node is None:
        raise Skip("no node on PATH")
    port = free_port()
    proc = c.popen([node, str(server), f"--port={port}", "--headless"], env={**c.env, "NODE_ENV": "production"})

    def via(target: int) -> Route:
        return Route(port, headers={"x-portkey-provider": "openai",
                                    "x-portkey-custom-host": f"http://127.0.0.1:{target}/v1"})

    return Peer("portkey", via(c.up), via(c.slow_up), [proc])


def start_litellm(c: Ctx) -> Peer:
    if not LITELLM.exists():
        raise Skip(f"{LITELLM} is missing (make bench-litellm installs it)")
    port = free_port()
    cfg = c.tmp / "litellm.yaml"
    # Same model, same prices as pricing/tables (USD per token), prometheus callback on.
    models = "".join(f"""  - model_name: {name}
    litellm_params:
      model: openai/{MODEL}
      api_base: http://127.0.0.1:{target}/v1
      api_key: sk-bench-upstream
    model_info:
      input_cost_per_token: 0.000002
      output_cost_per_token: 0.00001
      cache_read_input_token_cost: 0.0000002
""" for name, target in ((MODEL, c.up), ("kimi-slow", c.slow_up)))
    cfg.write_text(f"""model_list:
{models}litellm_settings:
  callbacks: ["prometheus"]
  telemetry: false
general_settings:
  master_key: {c.master_key}
""")
    env = {**c.env, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR", "NO_DOCS": "True"}
    proc = c.popen([str(LITELLM), "--config", str(cfg), "--host", "127.0.0.1", "--port", str(port),
                    "--num_workers", "1"], env=env)
    return Peer("litellm", Route(port), Route(port, model="kimi-slow"), [proc])


STARTERS: dict[str, Callable[[Ctx], Peer]] = {
    "direct": start_direct, "nginx": start_nginx, "floor_relay": start_floor,
    "noop_relay": lambda c: start_noop(c, "own"), "noop_relay_aiohttp": lambda c: start_noop(c, "aiohttp"),
    "llmmeter": lambda c: start_llmmeter(c, False), "llmmeter_budgets": lambda c: start_llmmeter(c, True),
    "tensorzero": start_tensorzero, "portkey": start_portkey, "litellm": start_litellm}


# --- versions --------------------------------------------------------------------------------

def _run(cmd: list[str], any_status: bool = False) -> str:
    """The command's output, or "unknown" when it fails (`wrk -v` exits with 1 after its version)."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        if p.returncode == 0 or any_status:
            return (p.stdout + p.stderr).strip() or "unknown"
    return "unknown"


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("llmmeter", "uvicorn", "uvloop", "httptools", "orjson", "prometheus-client", "aiohttp"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[pkg] = metadata.version(pkg)
    if shutil.which("wrk"):
        out["wrk"] = _run(["wrk", "-v"], any_status=True).split("\n")[0].strip()
    if nginx := shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None):
        out["nginx"] = _run([nginx, "-v"]).removeprefix("nginx version: ").removeprefix("nginx/")
    for pkg, py in (("litellm", LITELLM.parent / "python"), ("tensorzero", TENSORZERO_PY)):
        if py.exists():
            out[pkg] = _run([str(py), "-c", f"import importlib.metadata as m; print(m.version('{pkg}'))"])
    for name, pkg in (("portkey", "@portkey-ai/gateway"), ("hono", "hono"), ("@hono/node-server", "@hono/node-server")):
        manifest = BENCH / "portkey" / "node_modules" / pkg / "package.json"
        if manifest.exists():
            out[name] = json.loads(manifest.read_text())["version"]
    if shutil.which("node"):
        out["node"] = _run(["node", "--version"])
    return out


# --- measuring -------------------------------------------------------------------------------

def measure(peers: list[Peer], a: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Every measurement in rounds, each round over every path in turn."""
    res: dict[str, dict[str, Any]] = {p.name: {"lat": [], "ttfb": []} for p in peers}
    for i in range(a.rounds):
        for p in peers:
            # ~30 ms a call: fewer sequential calls keep LiteLLM's rounds short
            n = max(20, (min(a.requests, 300) if p.name == "litellm" else a.requests) // a.rounds)
            print(f"  round {i + 1}: {p.name} sequential", file=sys.stderr)
            res[p.name]["lat"] += sequential(p, n, False)
            res[p.name]["ttfb"] += sequential(p, max(25, n // 4), True)
    for p in peers:
        r = res[p.name]
        lat, ttfb = r.pop("lat"), r.pop("ttfb")
        r.update({"p50_ms": statistics.median(lat) * 1000, "p99_ms": pct(lat, 0.99) * 1000,
                  "stream_ttfb_p50_ms": statistics.median(ttfb) * 1000, "sequential_requests": len(lat),
                  # Before wrk: no request was abandoned yet, so llmmeter has estimated nothing
                  # (an estimate loads the o200k vocabulary: 8 MB compact, 43 MB with tiktoken).
                  "peak_rss_mb_sequential": rss_mb(p.pids())})
        # Warm-up, for every path alike: the requests wrk abandons when it stops are estimated, and
        # llmmeter's first estimate loads the vocabulary (~0.7 s of CPU, once per process). Left to
        # the first measured run, that one-off cost would land inside it; throughput is steady state.
        wrk(p, 1, 32, False)
    time.sleep(2)
    for stream in (False, True):
        for conns in CONNECTIONS:
            key = f"wrk_{conns}{'_stream' if stream else ''}"
            for i in range(a.rounds):
                # Each round starts one path further on, so no path is always first after a pause.
                for p in peers[i % len(peers):] + peers[:i % len(peers)]:
                    print(f"  round {i + 1}: {p.name} wrk {conns} connections{' streamed' if stream else ''}",
                          file=sys.stderr)
                    res[p.name].setdefault(key, {"rounds": []})["rounds"].append(wrk(p, a.duration, conns, stream))
            for p in peers:
                res[p.name][key] = summarize_wrk(res[p.name][key]["rounds"])
    for p in peers:
        res[p.name]["peak_rss_mb"] = rss_mb(p.pids())
    return res


def summarize_wrk(rounds: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    done = [r for r in rounds if r]
    if not done:
        return None
    cpu = [r["cpu_s_per_1000"] for r in done if r["cpu_s_per_1000"] is not None]
    return {"rps": statistics.median(r["rps"] for r in done),
            "cpu_s_per_1000": statistics.median(cpu) if cpu else None,
            "requests": sum(r["requests"] for r in done), "non_2xx": sum(r["non_2xx"] for r in done),
            "socket_errors": sum(r["socket_errors"] for r in done), "rounds": rounds}


def rss_probe(c: Ctx, a: argparse.Namespace, headers: dict[str, str]) -> dict[str, float]:
    """A fresh llmmeter under wrk at 128 connections, RSS sampled every 50 ms. Until wrk stops,
    every request reports usage, so nothing is estimated; at its stop wrk abandons the
    requests in flight, which are estimated (client_closed) and load the o200k vocabulary."""
    port = free_port()
    proc = c.popen([sys.executable, "-m", "proxy", "serve", "--port", str(port), "--upstream",
                    f"http://127.0.0.1:{c.up}/v1", "--db", f"sqlite:///{c.tmp}/probe.db"])
    peer = Peer("llmmeter_probe", Route(port), Route(port), [proc], headers)
    try:
        wait_up(port, [proc])
        pids, samples, stop = peer.pids(), [], threading.Event()

        def sample() -> None:
            while not stop.wait(0.05):
                samples.append(rss_mb(pids, "VmRSS"))

        before = rss_mb(pids, "VmRSS")
        t = threading.Thread(target=sample)
        t.start()
        threading.Timer(a.duration - 0.3, stop.set).start()  # stop sampling just before wrk stops
        wrk(peer, a.duration, 128, False)
        t.join()
        time.sleep(2)  # the abandoned requests' estimates
        return {"idle_mb": before, "under_load_before_any_estimate_mb": max(samples, default=before),
                "after_first_estimates_mb": rss_mb(pids, "VmRSS"), "peak_mb": rss_mb(pids)}
    finally:
        proc.terminate()
        proc.wait(20)


# --- ratios and targets ----------------------------------------------------------------------

def round_ratio(paths: dict[str, Any], a: str, b: str, key: str, metric: str) -> float | None:
    """Median over the rounds of a's metric over b's, rounds with non-2xx answers left out."""
    ra, rb = ((paths.get(x) or {}).get(key) or {} for x in (a, b))
    ratios = [x[metric] / y[metric] for x, y in zip(ra.get("rounds", []), rb.get("rounds", []), strict=False)
              if x and y and x[metric] and y[metric] and not x["non_2xx"] and not y["non_2xx"]]
    return statistics.median(ratios) if ratios else None


def ledger_rows(db: Path) -> dict[str, int]:
    import sqlite3

    if not db.exists():
        return {}
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT outcome, usage_source, count(*) FROM requests GROUP BY 1, 2").fetchall()
    return {f"{outcome}/{source}": n for outcome, source, n in rows}


def met(value: float | None, op: str, bound: float) -> bool | None:
    if value is None:
        return None
    return {"<=": value <= bound, "<": value < bound, ">=": value >= bound, ">": value > bound}[op]


def summarize(results: dict[str, Any], tmp: Path) -> None:
    paths = results["paths"]
    d = paths.get("direct")
    for r in paths.values():
        if d is not None:
            r["added_p50_ms"] = r["p50_ms"] - d["p50_ms"]
            r["added_p99_ms"] = r["p99_ms"] - d["p99_ms"]
            r["added_stream_ttfb_ms"] = r["stream_ttfb_p50_ms"] - d["stream_ttfb_p50_ms"]
    ratios: dict[str, Any] = {}
    for other in ("direct", "nginx", "floor_relay", "noop_relay", "tensorzero", "portkey", "litellm"):
        if other not in paths or "llmmeter" not in paths:
            continue
        for key in WRK_KEYS:
            ratios[f"{key}_rps_llmmeter_vs_{other}"] = round_ratio(paths, "llmmeter", other, key, "rps")
            ratios[f"{key}_cpu_llmmeter_vs_{other}"] = round_ratio(paths, "llmmeter", other, key, "cpu_s_per_1000")
    for relay in ("floor_relay", "noop_relay"):  # the floors under a relay in Python, against nginx and direct
        for other in ("nginx", "direct"):
            if relay in paths and other in paths:
                for key in WRK_KEYS:
                    for metric, short in (("rps", "rps"), ("cpu_s_per_1000", "cpu")):
                        ratios[f"{key}_{short}_{relay}_vs_{other}"] = round_ratio(paths, relay, other, key, metric)
    if "noop_relay" in paths and "noop_relay_aiohttp" in paths:
        for key in WRK_KEYS:
            ratios[f"{key}_rps_noop_aiohttp_vs_noop_own"] = round_ratio(paths, "noop_relay_aiohttp", "noop_relay",
                                                                        key, "rps")
            ratios[f"{key}_cpu_noop_aiohttp_vs_noop_own"] = round_ratio(paths, "noop_relay_aiohttp", "noop_relay",
                                                                        key, "cpu_s_per_1000")
    if "llmmeter" in paths and "llmmeter_budgets" in paths:
        for key in WRK_KEYS:
            ratios[f"{key}_rps_budgets_vs_llmmeter"] = round_ratio(paths, "llmmeter_budgets", "llmmeter", key, "rps")
            ratios[f"{key}_cpu_budgets_vs_llmmeter"] = round_ratio(paths, "llmmeter_budgets", "llmmeter", key,
                                                                   "cpu_s_per_1000")
    results["ratios"] = ratios
    m, b = paths.get("llmmeter") or {}, paths.get("llmmeter_budgets") or {}
    checks: dict[str, float | None] = {
        "added_p50_ms": m.get("added_p50_ms"), "added_p99_ms": m.get("added_p99_ms"),
        "added_stream_ttfb_ms": m.get("added_stream_ttfb_ms"),
        "rps_32_vs_direct": ratios.get("wrk_32_rps_llmmeter_vs_direct"),
        "rps_32_stream_vs_direct": ratios.get("wrk_32_stream_rps_llmmeter_vs_direct"),
        "cpu_per_request_vs_nginx": ratios.get("wrk_32_cpu_llmmeter_vs_nginx"),
        "cpu_per_request_vs_tensorzero": ratios.get("wrk_32_cpu_llmmeter_vs_tensorzero"),
        "rps_32_vs_tensorzero": ratios.get("wrk_32_rps_llmmeter_vs_tensorzero"),
        "peak_rss_mb": m.get("peak_rss_mb"),
        "peak_rss_mb_before_any_estimate": (m.get("rss_probe") or {}).get("under_load_before_any_estimate_mb"),
        "budgets_added_p50_ms": b.get("added_p50_ms"),
        "budgets_rps_32_vs_no_budgets": ratios.get("wrk_32_rps_budgets_vs_llmmeter"),
        "budgets_rps_32_stream_vs_no_budgets": ratios.get("wrk_32_stream_rps_budgets_vs_llmmeter")}
    results["targets"] = {k: {"value": v, "op": TARGETS[k][0], "target": TARGETS[k][1],
                              "met": met(v, *TARGETS[k])} for k, v in checks.items()}
    time.sleep(1)  # let the importers catch up
    for name in ("llmmeter", "llmmeter_budgets"):
        if name in paths:
            # Every request admitted: none refused, none rejected for want of the database.
            paths[name]["ledger_rows"] = ledger_rows(tmp / f"{name}.db")


# --- reporting -------------------------------------------------------------------------------

LABELS = {"direct": "direct", "nginx": "nginx", "floor_relay": "floor (Python)", "noop_relay": "noop own",
          "noop_relay_aiohttp": "noop aiohttp",
          "llmmeter": "**llmmeter**", "llmmeter_budgets": "llmmeter, enforced budget", "tensorzero": "TensorZero",
          "portkey": "Portkey", "litellm": "LiteLLM"}


def label(name: str, v: dict[str, str]) -> str:
    version = {"nginx": "nginx", "tensorzero": "tensorzero", "portkey": "portkey", "litellm": "litellm"}.get(name)
    number = (v.get(version) or "").removeprefix("nginx/") if version else ""
    return LABELS.get(name, name) + (f" {number}" if number and number != "unknown" else "")


def _f(x: float | None, fmt: str) -> str:
    return "n/a" if x is None else format(x, fmt)


def markdown(results: dict[str, Any]) -> str:
    """The docs tables (docs/benchmarks.md, "Relay") from a run's JSON."""
    v, paths = results["versions"], results["paths"]
    out = [f"Command: `{results['command']}`; {results['machine']['cpus']} CPUs, load average "
           f"{_f(results['machine']['load_avg_start'][0], '.1f')} at the start, "
           f"{_f(results['machine']['load_avg_end'][0], '.1f')} at the end; {results['rounds']} rounds.", "",
           "| path | added p50 ms | added p99 ms | stream TTFB ms | CPU ms / req @32 | CPU ms / stream @32 "
           "| peak RSS MB |", "|---|---|---|---|---|---|---|"]
    for name, r in paths.items():
        out.append(f"| {label(name, v)} | {_f(r.get('added_p50_ms'), '.3f')} | {_f(r.get('added_p99_ms'), '.3f')} "
                   f"| {r['stream_ttfb_p50_ms']:.3f} | {_f((r.get('wrk_32') or {}).get('cpu_s_per_1000'), '.3f')} "
                   f"| {_f((r.get('wrk_32_stream') or {}).get('cpu_s_per_1000'), '.3f')} | {r['peak_rss_mb']:.0f} |")
    out += ["", "| path | req/s @1 | req/s @32 | req/s @128 | streams/s @1 | streams/s @32 | streams/s @128 |",
            "|---|---|---|---|---|---|---|"]
    for name, r in paths.items():
        cells = []
        for key in WRK_KEYS:
            w = r.get(key)
            bad = f" ({w['non_2xx']} non-2xx)" if w and w["non_2xx"] else ""
            cells.append("n/a" if not w else f"{w['rps']:,.0f}{bad}")
        out.append(f"| {label(name, v)} | " + " | ".join(cells) + " |")
    if results.get("skipped"):
        out += [""] + [f"- {name} skipped: {why}" for name, why in results["skipped"].items()]
    ratios = results["ratios"]
    others = [n for n in ("direct", "nginx", "floor_relay", "noop_relay", "tensorzero", "portkey", "litellm")
              if f"wrk_32_rps_llmmeter_vs_{n}" in ratios]
    if others:
        out += ["", "llmmeter against each path, median of the rounds' ratios at 32 connections "
                "(throughput: above 1, llmmeter serves more; CPU per request: below 1, llmmeter spends less):", "",
                "| llmmeter against | req/s | streams/s | CPU per request | CPU per stream |", "|---|---|---|---|---|"]
        for n in others:
            out.append(f"| {label(n, v)} | " + " | ".join(
                _f(ratios.get(f"wrk_32{s}_{m}_llmmeter_vs_{n}"), ".2f")
                for m, s in (("rps", ""), ("rps", "_stream"), ("cpu", ""), ("cpu", "_stream"))) + " |")
    floors = [(n, o) for n in ("floor_relay", "noop_relay") for o in ("nginx", "direct")
              if f"wrk_32_cpu_{n}_vs_{o}" in ratios]
    if floors:
        out += ["", "The relays that meter nothing against nginx and direct, median of the rounds' ratios at "
                "32 connections:", "", "| path | against | req/s | CPU per request |", "|---|---|---|---|"]
        for n, o in floors:
            out.append(f"| {label(n, v)} | {label(o, v)} | {_f(ratios.get(f'wrk_32_rps_{n}_vs_{o}'), '.2f')} "
                       f"| {_f(ratios.get(f'wrk_32_cpu_{n}_vs_{o}'), '.2f')} |")
    out += ["", "| target (`TARGETS` in `bench/relay.py`) | measured | |", "|---|---|---|"]
    for k, t in results["targets"].items():
        state = {True: "met", False: "**not met**", None: "not measured"}[t["met"]]
        out.append(f"| {k} {t['op']} {t['target']:g} | {_f(t['value'], '.3f')} | {state} |")
    return "\n".join(out)


def report(results: dict[str, Any]) -> None:
    print(f"{'path':<20} {'+p50 ms':>7} {'+p99 ms':>7} {'TTFB ms':>7} {'rps@1':>7} {'rps@32':>7} {'rps@128':>7} "
          f"{'s@1':>6} {'s@32':>6} {'s@128':>6} {'cpu s/1k':>8} {'RSS MB':>6}")
    for name, r in results["paths"].items():
        cpu = (r.get("wrk_32") or {}).get("cpu_s_per_1000")
        bad = sum((r.get(k) or {}).get("non_2xx", 0) for k in WRK_KEYS)
        print(f"{name:<20} {_f(r.get('added_p50_ms'), '7.3f')} {_f(r.get('added_p99_ms'), '7.3f')} "
              f"{r['stream_ttfb_p50_ms']:7.3f} "
              + " ".join(f"{(r.get(k) or {}).get('rps', 0):7.0f}" for k in WRK_KEYS[:3]) + " "
              + " ".join(f"{(r.get(k) or {}).get('rps', 0):6.0f}" for k in WRK_KEYS[3:])
              + f" {_f(cpu, '8.3f')} {r['peak_rss_mb']:6.0f}" + (f"  {bad} NON-2XX" if bad else ""))
    for name, why in results.get("skipped", {}).items():
        print(f"{name:<20} skipped: {why}")
    for k, t in results["targets"].items():
        state = {True: "met", False: "NOT met", None: "not measured"}[t["met"]]
        print(f"  {k:<36} {_f(t['value'], '8.3f')}  target {t['op']} {t['target']:g}  {state}")
    probe = (results["paths"].get("llmmeter") or {}).get("rss_probe")
    if probe:
        print(f"llmmeter RSS (fresh process, wrk 128 connections): idle {probe['idle_mb']:.0f} MB, under load "
              f"{probe['under_load_before_any_estimate_mb']:.0f} MB, after its first estimates "
              f"{probe['after_first_estimates_mb']:.0f} MB, peak {probe['peak_mb']:.0f} MB")
    for name in ("llmmeter", "llmmeter_budgets"):
        if rows := (results["paths"].get(name) or {}).get("ledger_rows"):
            print(f"{name} ledger rows: {rows}")
    print(f"load average {results['machine']['load_avg_start']} -> {results['machine']['load_avg_end']}")


# --- main ------------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--paths", default=",".join(PATHS), help=f"comma-separated, of: {','.join(PATHS)}")
    ap.add_argument("--rounds", type=int, default=3, help="alternated rounds; the median is reported")
    ap.add_argument("--requests", type=int, default=2000, help="sequential requests per path, over all rounds")
    ap.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    ap.add_argument("--out", type=Path, default=BENCH / "results" / "relay.json")
    ap.add_argument("--markdown", action="store_true", help="print the docs tables from --out and exit")
    ap.add_argument("--verbose", action="store_true", help="the paths' own output on the terminal")
    a = ap.parse_args()
    if a.markdown:
        print(markdown(json.loads(a.out.read_text())))
        return
    names = [n.strip() for n in a.paths.split(",") if n.strip()]
    if unknown := set(names) - set(PATHS):
        ap.error(f"unknown paths: {', '.join(sorted(unknown))}")
    # direct always: the reference every added latency and ratio is taken from; PATHS's order
    # keeps llmmeter beside its no-op relays and its budgeted twin.
    names = [n for n in PATHS if n in names or n == "direct"]
    tmp = Path(tempfile.mkdtemp(prefix="llmmeter-bench-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLMMETER_", "PROMETHEUS_MULTIPROC"))}
    c = Ctx(tmp, env, free_port(), free_port(), "sk-" + secrets.token_urlsafe(32), quiet=not a.verbose)
    headers = {"content-type": "application/json", "authorization": f"Bearer {c.master_key}"}
    py = sys.executable
    load_start = os.getloadavg()
    skipped: dict[str, str] = {}
    try:
        upstreams = []
        for port, extra in ((c.up, {}), (c.slow_up, {"x-fake-delay-ms": str(SLOW_DELAY_MS)})):
            defaults = [x for k, val in {**UPSTREAM_DEFAULTS, **extra}.items() for x in ("--default", f"{k}={val}")]
            upstreams.append(c.popen([py, str(ROOT / "tests" / "fake_upstream.py"), "--port", str(port), *defaults]))
        for port, proc in zip((c.up, c.slow_up), upstreams, strict=True):
            wait_up(port, [proc])
        up_peer: list[Proc] = [upstreams[0]]
        peers: list[Peer] = []
        for name in names:
            try:
                peer = STARTERS[name](c)
            except Skip as e:
                skipped[name] = str(e)
                continue
            if name == "direct":
                peer.procs = up_peer
            peer.headers = headers
            peers.append(peer)
        ready: list[Peer] = []
        verified: dict[str, Any] = {}
        for peer in peers:
            try:
                wait_up(peer.route.port, peer.procs)
                if peer.slow.port != peer.route.port:
                    wait_up(peer.slow.port, peer.procs)
                verified[peer.name] = verify(peer)
                ready.append(peer)
            except (Skip, OSError, ValueError) as e:
                skipped[peer.name] = str(e) or type(e).__name__
                if peer.name == "direct":
                    raise SystemExit(f"the fake upstream does not answer right: {e}") from e
                for proc in peer.procs:
                    proc.terminate()
        for name, why in skipped.items():
            print(f"  {name}: skipped: {why}", file=sys.stderr)
        results: dict[str, Any] = {
            "command": " ".join(["python", "bench/relay.py", *sys.argv[1:]]), "rounds": a.rounds,
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_avg_start": load_start},
            "versions": versions(), "upstream": UPSTREAM_DEFAULTS, "skipped": skipped}
        results["paths"] = measure(ready, a)
        for name, check in verified.items():
            results["paths"][name]["verified"] = check
        if "llmmeter" in results["paths"]:
            print("  llmmeter: RSS under load before any estimate", file=sys.stderr)
            results["paths"]["llmmeter"]["rss_probe"] = rss_probe(c, a, headers)
        results["machine"]["load_avg_end"] = os.getloadavg()
        summarize(results, tmp)
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(results, indent=2))
        report(results)
        print(f"wrote {a.out}")
    finally:
        for proc in c.all_procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in c.all_procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
