"""Report time: wall, CPU and peak RSS of `llmmeter report` over a seeded ledger.

    python bench/seed_ledger.py --rows 10000000 --month 2026-11 --db sqlite:///data/r10m.db
    python bench/report_time.py --db sqlite:///data/r10m.db [--month 2026-11] [--tz America/Sao_Paulo] [--runs 3]

Each run is a fresh process (`python -m proxy report ... --format json`), as a user runs
it: starting Python and loading the price tables count. CPU is the child's user + system
time and peak RSS its maximum resident set, from the kernel (getrusage), as /usr/bin/time
reports them. The load average is printed beside each run: on a shared machine the wall
time includes waiting for a core. A PostgreSQL server's own CPU is not in the figures.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(db: str, month: str, tz: str) -> tuple[float, float, int]:
    """(wall s, CPU s, peak RSS KB) of one report process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "proxy", "report", "--month", month, "--tz", tz, "--format", "json",
                    "--db", db], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, after.ru_maxrss  # the largest child so far: runs of one ledger are alike


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--month", default="2026-11")
    ap.add_argument("--tz", default="America/Sao_Paulo")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    for i in range(a.runs):
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        wall, cpu, rss = run(a.db, a.month, a.tz)
        print(f"run {i + 1}: wall {wall:.2f} s, CPU {cpu:.2f} s, peak RSS {rss / 1024:.0f} MB (load average {load})")


if __name__ == "__main__":
    main()
