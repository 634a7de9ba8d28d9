"""Ledger benchmark: records per second through the proxy's real write path.

    python bench/ledger.py [--records 100000] [--db sqlite:///tmp/x.db] [--out bench/results/ledger.json]

Each record goes in through `Ledger.append` (one journal write each, then the in-memory
backlog) on the calling thread; the proxy journals a loop turn's records with one write,
so this is the slower case. The ledger's own importer thread moves the backlog into the
database in batches (each batch also adds to the hourly rollup and the size histogram).
The clock runs from the first append until `flush()` says everything is committed, so
the rate is what the database sustains, not just what the journal takes.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pricing import PriceBook, cost, default_tables_dir, load_dir
from proxy.ledger import Ledger
from proxy.ledger.record import Record
from proxy.metering.meter import new_id
from proxy.settings import Workloads

ROOT = Path(__file__).resolve().parents[1]


def records(n: int, seed: int = 1) -> list[Record]:
    """Priced records shaped like the relay's (made beforehand: only the ledger is timed)."""
    rng = random.Random(seed)
    book = PriceBook(load_dir(default_tables_dir()))
    workloads = Workloads()
    now = datetime.now(UTC)
    out = []
    for i in range(n):
        side = int(rng.lognormvariate(8.5, 1.4)) + 50
        cached = int(side * 0.6) if rng.random() < 0.6 else 0
        output = int(rng.lognormvariate(5.5, 1.0)) + 1
        tier = "highspeed" if rng.random() < 0.2 else "standard"
        start = now - timedelta(milliseconds=n - i)
        rec = Record(id=new_id(), start=start, tenant=rng.choice(("search-team", "agents", "default")),
                     endpoint="chat", stream=rng.random() < 0.6, code=200, outcome="ok", upstream="moonshot",
                     model_requested="kimi-k3.1-pro", response_model="kimi-k3.1-pro", model="kimi-k3.1-pro",
                     tier=tier, input_tokens=side - cached, cache_read_tokens=cached, output_tokens=output,
                     duration_ms=output * 30, ttft_ms=300, tag=rng.choice(("rag-search", "code-agent", None)),
                     workload=workloads.classify(side), upstream_request_id=f"req_{i:012d}")
        found = book.resolve("kimi-k3.1-pro", tier, start)
        assert found is not None
        p = found.price
        rec.price_model, rec.price_tier, rec.price_effective_from = p.model, p.tier, p.effective_from
        rec.cost_units = cost(p, rec.input_tokens, cached, 0, output).total
        out.append(rec)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--db", help="ledger URL (default: a fresh SQLite file in a temporary directory)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "ledger.json")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="llmmeter-ledger-bench-"))
    url = a.db or f"sqlite:///{tmp}/ledger.db"
    try:
        batch = records(a.records)
        ledger = Ledger(url, tmp / "journal")
        ledger.start()
        t0 = time.perf_counter()
        for rec in batch:
            ledger.append(rec)
        appended = time.perf_counter() - t0
        if not ledger.flush(timeout=600):
            raise SystemExit("the ledger did not commit everything within 600 s")
        total = time.perf_counter() - t0
        ledger.close()
        result = {
            "records": a.records, "db": "sqlite" if url.startswith("sqlite") else url.split(":", 1)[0],
            "records_per_s": a.records / total, "append_us_per_record": appended / a.records * 1e6,
            "seconds": total,
        }
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(result, indent=2))
        print(f"{a.records:,} records committed in {total:.2f} s: {result['records_per_s']:,.0f} records/s "
              f"(append on the request path: {result['append_us_per_record']:.1f} µs each) -> {a.out}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
