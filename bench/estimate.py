"""Both estimate engines side by side: first load, memory, and counting speed.

Each engine runs in a fresh interpreter: the RSS its o200k load adds (after cl100k has
warmed imports and the allocator), the load's time, then the counting rate on this
repository's Markdown and Python files, first pass (empty piece cache) and second.

    python bench/estimate.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ONE = r"""
import gc, json, sys, time
from pathlib import Path
from proxy.tokens import Estimator

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


def main() -> None:
    with tempfile.TemporaryDirectory() as cache:
        for engine in ("compact", "tiktoken"):
            done = subprocess.run([sys.executable, "-c", ONE, engine, str(ROOT)], cwd=ROOT, check=True,
                                  env={"TIKTOKEN_CACHE_DIR": cache, "PATH": "/usr/bin:/bin"},
                                  capture_output=True, text=True)
            print(json.dumps(json.loads(done.stdout)))


if __name__ == "__main__":
    main()
