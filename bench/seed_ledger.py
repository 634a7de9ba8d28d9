"""Fill a ledger with N synthetic records spread over one month, for report and export benchmarks.

    python bench/seed_ledger.py --rows 1000000 --month 2026-11 --db sqlite:///data/bench.db

A realistic mix: kimi-k3.1-pro at both tiers (plus a little unpriced traffic), three
tenants, tags and untagged calls, every workload class, a daytime peak, ~60% cache
hits on the input side, and a time to first token on every stream. Costs come from the
shipped price tables, as the proxy's would.
Deterministic for a given --seed. Rows go in time order through the ledger's own writer.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pricing import PriceBook, cost, default_tables_dir, load_dir
from proxy.ledger.record import Record
from proxy.ledger.store import open_store
from proxy.settings import Workloads

TENANTS = (("search-team", 5), ("agents", 4), ("default", 1))
TAGS = (("rag-search", 4), ("code-agent", 4), (None, 2))
BATCH = 5000


def arrivals(rng: random.Random, first: datetime, seconds: int, rows: int) -> Iterator[datetime]:
    """`rows` start times in time order, as a proxy writes them, with a daytime peak.

    Each hour gets its share of the rows by a weight that follows the hour of day
    (carried over so the shares add up exactly), spread at random within the hour.
    """
    hours = seconds // 3600
    weights = [0.25 + 0.75 * max(0.0, math.sin(math.pi * (h % 24 - 7) / 14)) for h in range(hours)]
    per_weight, carry = rows / sum(weights), 0.0
    for h, w in enumerate(weights):
        carry += w * per_weight
        n = rows if h == hours - 1 else int(carry)
        carry -= n
        rows -= n
        for off in sorted(rng.random() * 3600 for _ in range(n)):
            yield first + timedelta(seconds=h * 3600 + off)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--month", required=True, metavar="YYYY-MM")
    ap.add_argument("--db", required=True)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    timing = random.Random(f"{a.seed}-timing")
    book = PriceBook(load_dir(default_tables_dir()))
    first = datetime.strptime(a.month, "%Y-%m").replace(tzinfo=UTC)
    seconds = ((first + timedelta(days=32)).replace(day=1) - first).total_seconds()
    store = open_store(a.db)
    store.migrate()
    writer = store.writer()
    workloads = Workloads()
    t0 = time.perf_counter()
    batch: list[Record] = []
    for i, start in enumerate(arrivals(rng, first, int(seconds), a.rows)):
        tenant = rng.choices([t for t, _ in TENANTS], [w for _, w in TENANTS])[0]
        tag = rng.choices([t for t, _ in TAGS], [w for _, w in TAGS])[0]
        side = int(rng.lognormvariate(8.5, 1.4)) + 50  # input-side tokens: mostly short, a long tail
        side = min(side, 1_000_000)
        cached = int(side * rng.choice((0, 0.6, 0.8, 0.9))) if rng.random() < 0.7 else 0
        out = int(rng.lognormvariate(5.5, 1.0)) + 1
        model, tier = ("kimi-k3.1-pro", "highspeed" if rng.random() < 0.2 else "standard")
        if rng.random() < 0.01:
            model, tier = "some-unpriced-model", "standard"
        stream = rng.random() < 0.6
        estimated = rng.random() < 0.01
        # A stream's time to first token grows with its input side (prefill); the rest of the
        # duration is decoding at ~30 ms a token, varying by call. Drawn from their own
        # generator, so every other field is what earlier versions of this script seeded.
        ttft = int(timing.lognormvariate(5.5, 0.6) + side / 200) if stream else None
        decode_ms = int(out * timing.lognormvariate(3.4, 0.3))
        rec = Record(id=f"seed-{a.seed}-{i:010d}", start=start, tenant=tenant, endpoint="chat",
                     stream=stream, code=200, outcome="ok", upstream="moonshot",
                     model_requested=model, response_model=model, input_tokens=side - cached,
                     cache_read_tokens=cached, output_tokens=out, reasoning_tokens=None,
                     usage_source="estimated" if estimated else "upstream",
                     duration_ms=(ttft or 0) + decode_ms, ttft_ms=ttft, tag=tag, workload=workloads.classify(side))
        found = book.resolve(model, tier, start)
        if found is not None:
            p = found.price
            rec.model, rec.tier = model, tier
            rec.price_model, rec.price_tier, rec.price_effective_from = p.model, p.tier, p.effective_from
            rec.cost_units = cost(p, rec.input_tokens, cached, 0, out).total
        batch.append(rec)
        if len(batch) >= BATCH:
            writer.insert_many(batch)
            batch = []
    if batch:
        writer.insert_many(batch)
    writer.close()
    print(f"seeded {a.rows:,} records for {a.month} in {time.perf_counter() - t0:.1f} s -> {a.db}")


if __name__ == "__main__":
    main()
