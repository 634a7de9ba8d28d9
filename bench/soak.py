"""Soak: llmmeter at a steady rate for a long time, with streams, disconnects and failures mixed in.

    python bench/soak.py [--minutes 30] [--rate 40] [--out bench/results/soak.json]

Starts the fake upstream (tests/fake_upstream.py) and `llmmeter serve` with a fresh SQLite
ledger, then sends `--rate` requests a second: plain calls, streams, streams the client
abandons after the first chunk, streams the upstream resets, upstream 5xx and 429s, and
requests with no usage (estimated). Every minute it samples llmmeter's RSS, open file
descriptors and threads (from /proc), the ledger's row count, pending records and the
upstream's open connections. It reports the sample after the warm-up and the last one:
after the warm-up nothing but the ledger should grow, and every request should have
exactly one row.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.faults.helpers import open_connections  # noqa: E402
from tests.serve import free_port  # noqa: E402

MESSAGES = [{"role": "user", "content": "tell me about the weather in Recife in november"}]
USAGE = json.dumps({"prompt": 1200, "cached": 1000, "completion": 50})
# (weight, kind): what each request does.
MIX = [(40, "plain"), (25, "stream"), (10, "abandon"), (5, "reset"), (5, "error"), (5, "no_usage"),
       (5, "messages_stream"), (5, "responses")]
WARMUP_S = 60  # the first estimate loads the o200k vocabulary (~75 MB): start measuring after it


@dataclass
class Sample:
    t_s: float
    rss_mb: float
    fds: int
    threads: int
    rows: int
    pending: float
    upstream_connections: int
    sent: int


def proc_status(pid: int) -> tuple[float, int, int]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    fds = len(list(Path(f"/proc/{pid}/fd").iterdir()))
    return int(fields["VmRSS"].split()[0]) / 1024, fds, int(fields["Threads"])


def ledger_rows(db: Path) -> int:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return int(con.execute("SELECT count(*) FROM requests").fetchone()[0])
    except sqlite3.OperationalError:
        return 0
    finally:
        con.close()


def pending(url: str) -> float:
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("llmmeter_ledger_pending_records "):
            return float(line.split()[1])
    return -1.0


async def one(client: httpx.AsyncClient, base: str, kind: str) -> str:
    headers = {"x-fake-usage": USAGE, "x-fake-chunks": "20", "x-fake-delay-ms": "10"}
    chat = {"model": "kimi-k3.1-pro", "messages": MESSAGES}
    try:
        if kind == "plain":
            r = await client.post(base + "/chat/completions", json=chat, headers=headers)
            return str(r.status_code)
        if kind == "no_usage":
            r = await client.post(base + "/chat/completions", json=chat, headers={**headers, "x-fake-no-usage": "1"})
            return str(r.status_code)
        if kind == "error":
            status = random.choice(["500", "503", "429"])
            r = await client.post(base + "/chat/completions", json=chat, headers={**headers, "x-fake-status": status})
            return str(r.status_code)
        if kind == "responses":
            r = await client.post(base + "/responses", json={"model": "gpt-test", "input": "hi"}, headers=headers)
            return str(r.status_code)
        path, body = "/chat/completions", {**chat, "stream": True}
        if kind == "messages_stream":
            path, body = "/messages", {"model": "claude-test", "max_tokens": 64, "messages": MESSAGES, "stream": True}
        if kind == "reset":
            headers["x-fake-reset-after"] = "8"
        async with client.stream("POST", base + path, json=body, headers=headers) as r:
            async for _ in r.aiter_raw():
                if kind == "abandon":
                    break  # leave after the first chunk: the proxy must cancel the upstream request
        return str(r.status_code)
    except httpx.HTTPError as e:
        return type(e).__name__  # resets break the stream on purpose


async def load(base: str, rate: float, seconds: float, outcomes: dict[str, int], sent: list[int]) -> None:
    kinds = [k for w, k in MIX for _ in range(w)]
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)
    tasks: set[asyncio.Task[str]] = set()
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        t0 = time.monotonic()
        i = 0
        while time.monotonic() - t0 < seconds:
            due = t0 + i / rate
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            task = asyncio.create_task(one(client, base, random.choice(kinds)))
            tasks.add(task)
            task.add_done_callback(lambda t: (tasks.discard(t), outcomes.__setitem__(
                t.result(), outcomes.get(t.result(), 0) + 1)))
            sent[0] += 1
            i += 1
        if tasks:
            await asyncio.wait(tasks, timeout=60)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--rate", type=float, default=40, help="requests per second")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "soak.json")
    args = ap.parse_args(argv)
    random.seed(7)
    work = Path(tempfile.mkdtemp(prefix="llmmeter-soak-"))
    db = work / "ledger.db"
    up_port, port = free_port(), free_port()
    fake = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fake_upstream.py"), "--port", str(up_port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = (work / "serve.log").open("wb")
    serve = subprocess.Popen([sys.executable, "-m", "proxy", "serve", "--port", str(port), "--db", f"sqlite:///{db}",
                              "--upstream", f"http://127.0.0.1:{up_port}/v1"], cwd=work, stdout=log,
                             stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or serve.poll() is not None:
                raise SystemExit(f"llmmeter did not start; see {work / 'serve.log'}")
            time.sleep(0.1)
        samples: list[Sample] = []
        outcomes: dict[str, int] = {}
        sent = [0]
        t0 = time.monotonic()

        def sample() -> Sample:
            rss, fds, threads = proc_status(serve.pid)
            s = Sample(round(time.monotonic() - t0, 1), round(rss, 1), fds, threads, ledger_rows(db), pending(url),
                       open_connections(up_port), sent[0])
            samples.append(s)
            print(json.dumps(asdict(s)), flush=True)
            return s

        async def run() -> None:
            loader = asyncio.create_task(load(url + "/v1", args.rate, args.minutes * 60, outcomes, sent))
            next_at = WARMUP_S
            while not loader.done():
                await asyncio.sleep(1)
                if time.monotonic() - t0 >= next_at:
                    await asyncio.to_thread(sample)
                    next_at += 60
            await loader

        asyncio.run(run())
        time.sleep(3)  # the last batches reach the database
        end = sample()
        start = samples[0]
        result: dict[str, Any] = {
            "command": "python bench/soak.py " + " ".join(sys.argv[1:] if argv is None else argv),
            "minutes": args.minutes, "rate_per_s": args.rate, "sent": sent[0], "outcomes": outcomes,
            "start": asdict(start), "end": asdict(end), "samples": [asdict(s) for s in samples],
            "rss_growth_mb": round(end.rss_mb - start.rss_mb, 1), "fd_growth": end.fds - start.fds,
            "rows_equal_requests": end.rows == sent[0],
            "llmmeter_alive": serve.poll() is None,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"\n{'':22}{'start':>10}{'end':>10}")
        for name in ("t_s", "rss_mb", "fds", "threads", "rows", "pending", "upstream_connections", "sent"):
            print(f"{name:22}{getattr(start, name):>10}{getattr(end, name):>10}")
        print(f"requests sent {sent[0]}, ledger rows {end.rows}, outcomes {outcomes}")
        print(f"results in {args.out}")
    finally:
        serve.terminate()
        fake.terminate()
        serve.wait(20)
        fake.wait(20)
        log.close()


if __name__ == "__main__":
    main()
