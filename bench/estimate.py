"""Both estimate engines side by side: memory, counting speed, and what a pathological
body costs everyone else.

Each engine runs in a fresh interpreter per measurement:

- `load`: the RSS an o200k load adds (after cl100k has warmed imports and the
  allocator), the load's time, then the counting rate on this repository's Markdown and
  Python files, first pass (the compact counter's piece cache empty) and second.
- one body per case (`--cases`), estimated as a chat request through `Estimator.settle`
  on a uvloop event loop that also serves a TCP echo: a client process sends it 64-byte
  messages one after another, and the round trips that fall inside the estimate are
  compared with those before it (p50, p99, max: the latency the estimate added to other
  clients). Also the loop's longest stall (a 1 ms ticker), the estimate's time, the
  count and its flags, RSS with the vocabulary loaded, with the body built, and the
  peak while the estimate ran (VmHWM, reset just before it).

    python bench/estimate.py [--engines tiktoken,compact] [--cases a32m,spaces1m,...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CASES = {  # name: (what the content is, characters)
    "a32m": ("a", 32 << 20),  # one character repeated: one piece, no place to cut
    "spaces1m": (" ", 1_000_000),  # tiktoken 0.14 panics on it uncut
    "letters1m": ("letters", 1 << 20),  # random letters without a space: one long piece
    "prose32m": ("prose", 32 << 20),  # this repository's Markdown, repeated: the budget at work
    "messages1m": ("messages", 1_000_000),  # {"role":"user","content":"a"} a million times: 31 MB
}

LOAD = r"""
import gc, json, sys, time
from pathlib import Path
from proxy.metering.estimate.estimator import Estimator

def rss():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS")) / 1024

root = Path(sys.argv[2])
text = "\n".join(p.read_text() for p in sorted([*root.glob("*.md"), *root.glob("proxy/**/*.py")]))
est = Estimator("cl100k_base", [(["o200k"], "o200k_base")], engine=sys.argv[1])
est.count_text(None, "warm up imports and the allocator with cl100k")
gc.collect()
before = rss()
t = time.perf_counter()
est.load("o200k_base")
load_s = time.perf_counter() - t
gc.collect()
loaded = rss()
rates = []
for _ in range(2):
    t = time.perf_counter()
    tokens = est.count_text("o200k", text)
    rates.append(len(text.encode()) / (time.perf_counter() - t) / 1e6)
print(json.dumps({"engine": sys.argv[1], "o200k_mb": round(loaded - before, 1), "load_s": round(load_s, 2),
                  "text_mb": round(len(text.encode()) / 1e6, 2), "tokens": tokens,
                  "first_pass_mb_per_s": round(rates[0], 2), "second_pass_mb_per_s": round(rates[1], 2)}))
"""

# The "other client": blocking round trips, each stamped with the system-wide monotonic clock.
CLIENT = r"""
import json, socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
end, out, msg = time.monotonic() + float(sys.argv[2]), [], b"x" * 64
while time.monotonic() < end:
    t = time.monotonic()
    s.sendall(msg)
    got = b""
    while len(got) < 64:
        got += s.recv(64 - len(got))
    out.append((t, time.monotonic() - t))
    time.sleep(0.0005)
print(json.dumps(out))
"""

BODY = r"""
import asyncio, gc, json, random, string, subprocess, sys, time
from pathlib import Path
import uvloop
from proxy.metering.estimate.estimator import Estimator

def rss(field="VmRSS"):
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(field)) / 1024

engine, kind, size, root, client = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]), sys.argv[5]
est = Estimator(engine=engine)
est.count_text(None, "load the vocabulary before measuring")
rss_loaded = rss()
if kind == "letters":
    text = "".join(random.Random(1).choices(string.ascii_lowercase, k=size))
elif kind == "prose":
    prose = "\n".join(p.read_text() for p in sorted(root.glob("*.md")))
    text = (prose * (size // len(prose) + 1))[:size]
elif kind == "messages":
    text = ""
else:
    text = kind * size
messages = [{"role": "user", "content": text}]
if kind == "messages":
    messages = [{"role": "user", "content": "a"} for _ in range(size)]
body = {"model": "m", "messages": messages}
gc.collect()  # the first full collection over a new body is its parse's cost, not the estimate's
rss_body = rss()

async def main():
    async def echo(reader, writer):
        while data := await reader.read(65536):
            writer.write(data)
    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", client, str(port), "6",
                                                stdout=subprocess.PIPE)
    gaps, done = [], False
    async def ticker():
        while not done:
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            gaps.append(time.perf_counter() - t - 0.001)
    tick = asyncio.create_task(ticker())
    await asyncio.sleep(1.5)  # the client's idle round trips
    tally = est.tally()
    open("/proc/self/clear_refs", "w").write("5")  # the peak from here on is the estimate's
    t0 = time.monotonic()
    tokens = await est.settle("m", est.prompt_steps("chat", "m", body, tally))
    t1 = time.monotonic()
    done = True
    await tick
    out, _ = await proc.communicate()
    server.close()
    return t0, t1, tokens, tally.flags, json.loads(out), max(gaps)

uvloop.install()
t0, t1, tokens, flags, trips, stall = asyncio.run(main())

def pct(xs, q):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(len(xs) * q))] * 1000, 2) if xs else None

idle = [d for t, d in trips if t < t0]
busy = [d for t, d in trips if t0 <= t < t1]
print(json.dumps({
    "engine": engine, "case": sys.argv[6], "chars": size, "seconds": round(t1 - t0, 2),
    "tokens": tokens, "flags": list(flags), "round_trips_during": len(busy),
    "idle_p50_ms": pct(idle, 0.5), "idle_p99_ms": pct(idle, 0.99),
    "during_p50_ms": pct(busy, 0.5), "during_p99_ms": pct(busy, 0.99),
    "during_max_ms": pct(busy, 1.0), "loop_max_stall_ms": round(stall * 1000, 1),
    "rss_loaded_mb": round(rss_loaded), "rss_with_body_mb": round(rss_body),
    "peak_rss_during_mb": round(rss("VmHWM"))}))
"""


def fresh(code: str, *args: str, cache: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, check=True,
                          env={"TIKTOKEN_CACHE_DIR": cache, "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=900)
    result: dict[str, object] = json.loads(done.stdout)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", default="tiktoken,compact")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--no-load", action="store_true", help="skip the load and speed runs")
    args = ap.parse_args()
    engines = args.engines.split(",")
    with tempfile.TemporaryDirectory() as cache:
        if not args.no_load:
            for engine in engines:
                print(json.dumps(fresh(LOAD, engine, str(ROOT), cache=cache)), flush=True)
        for case in args.cases.split(","):
            kind, size = CASES[case]
            for engine in engines:
                print(json.dumps(fresh(BODY, engine, kind, str(size), str(ROOT), CLIENT, case, cache=cache)),
                      flush=True)


if __name__ == "__main__":
    main()
