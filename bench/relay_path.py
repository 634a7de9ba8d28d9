"""The relay's own CPU per request, in one process, without the serving socket.

    python bench/relay_path.py [--requests 20000] [--concurrency 32] [--app llmmeter|noop] [--profile FILE]

Starts the fake upstream (tests/fake_upstream.py, every reply with usage) and calls the
ASGI application directly on a uvloop event loop, `--concurrency` requests at a time:
llmmeter's (`create_app` with default settings and a fresh SQLite ledger, its lifespan run
as `serve` runs it, so the journal's group commit, the importer thread and the metrics are
all on) or the no-op relay's (bench/noop_relay.py). What the serving protocol and the
client's socket cost is left out, so the difference between the two apps is what metering
costs. Reported: the process's CPU per request (all threads: the importer's inserts too),
and the event-loop thread's alone,
with the part of it spent in the kernel. With `--profile` the measured requests run under
cProfile and its statistics go to FILE (per request figures: divide by --requests).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))
from procs import free_port, wait_up

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

BODY = json.dumps({"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": "hello"}]}).encode()
UPSTREAM = {"x-fake-usage": json.dumps({"prompt": 1200, "cached": 1000, "completion": 50}), "x-fake-chunks": "30"}
App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


def scope() -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
            "scheme": "http", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
            "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2),
            "extensions": {"llmmeter.disconnect": lambda gone: None},
            "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                        (b"content-length", str(len(BODY)).encode())]}


async def call(app: App) -> None:
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            await asyncio.Event().wait()
        sent = True
        return {"type": "http.request", "body": BODY, "more_body": False}

    status = 0

    async def send(msg: dict[str, Any]) -> None:
        nonlocal status
        if msg["type"] == "http.response.start":
            status = msg["status"]

    await app(scope(), receive, send)
    if status != 200:
        raise SystemExit(f"the app answered {status}")


async def lifespan(app: App) -> tuple[asyncio.Queue[dict[str, Any]], asyncio.Task[None]]:
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    task = asyncio.ensure_future(app({"type": "lifespan"}, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    msg = await outbox.get()
    if msg["type"] != "lifespan.startup.complete":
        raise SystemExit(f"start-up failed: {msg}")
    return inbox, task


async def run(a: argparse.Namespace, upstream: str, tmp: Path) -> dict[str, float]:
    if a.app == "noop":
        from noop_relay import make_app

        app: Any = make_app(upstream)
    else:
        from proxy.app import create_app
        from proxy.settings import load

        settings = load(None, env={}, overrides={"upstream": upstream + "/v1", "db": f"sqlite:///{tmp}/l.db"})
        app = create_app(settings)
        os.chdir(tmp)  # the journal's directory, beside the ledger
    inbox, task = await lifespan(app)

    async def worker(n: int) -> None:
        for _ in range(n):
            await call(app)

    per = a.requests // a.concurrency
    await asyncio.gather(*(worker(max(1, per // 5)) for _ in range(a.concurrency)))  # warm-up
    prof = cProfile.Profile() if a.profile else None
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    thread_t, proc_t, wall = time.thread_time(), time.process_time(), time.perf_counter()
    if prof is not None:
        prof.enable()
    await asyncio.gather(*(worker(per) for _ in range(a.concurrency)))
    if prof is not None:
        prof.disable()
        prof.dump_stats(a.profile)
    n = per * a.concurrency
    done = resource.getrusage(resource.RUSAGE_THREAD)
    out = {"requests": n, "loop_us_per_req": (time.thread_time() - thread_t) / n * 1e6,
           "loop_kernel_us_per_req": (done.ru_stime - usage.ru_stime) / n * 1e6,
           "process_us_per_req": (time.process_time() - proc_t) / n * 1e6,
           "rps": n / (time.perf_counter() - wall)}
    await inbox.put({"type": "lifespan.shutdown"})
    await task
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--app", choices=("llmmeter", "noop"), default="llmmeter")
    ap.add_argument("--profile")
    a = ap.parse_args()
    port = free_port()
    defaults = [x for k, v in UPSTREAM.items() for x in ("--default", f"{k}={v}")]
    up = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fake_upstream.py"), "--port", str(port), *defaults],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tmp = Path(tempfile.mkdtemp(prefix="llmmeter-path-"))
    try:
        wait_up(port, up)
        out = uvloop.run(run(a, f"http://127.0.0.1:{port}", tmp))
    finally:
        up.terminate()
        up.wait(20)
    print(json.dumps({"app": a.app, **{k: round(v, 1) for k, v in out.items()}}))


if __name__ == "__main__":
    main()
