"""Exact nearest-rank percentiles of input-side tokens per tenant, without sorting a month.

Migration 003's histogram (metered requests per UTC hour, tenant and size bucket) shows
which bucket holds each rank; the range's partial first and last hours (zones with
half-hour offsets) are counted from the requests. Then one scan counts by exact size only
the requests inside those few buckets. The store passes its reader, its WHERE clause for a
range of requests and its dialect's parameter mark.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime

from proxy.ledger.store.rows import HOUR_US, Row, from_micros, to_micros, whole_hours
from proxy.ledger.store.sql import BUCKET_OF, INPUT_SIDE, METERED_SQL

Read = Callable[[str, tuple[object, ...]], list[Row]]
Where = Callable[[datetime, datetime, str | None], tuple[str, tuple[object, ...]]]


def input_side_percentiles(read: Read, where: Where, mark: str, start_from: datetime, start_to: datetime,
                           tenant: str | None, percents: Sequence[int]) -> dict[str, list[int]]:
    lo, hi = to_micros(start_from), to_micros(start_to)
    first, last = whole_hours(lo, hi)
    only = (f" AND tenant = {mark}", (tenant,)) if tenant is not None else ("", ())
    rows = read(f"SELECT tenant, bucket, SUM(requests) AS requests FROM input_side_histogram WHERE hour >= {mark} "
                f"AND hour < {mark}{only[0]} GROUP BY 1, 2", (first // HOUR_US, last // HOUR_US, *only[1]))
    for a, b in ((lo, first), (last, hi)):
        if a < b:
            clause, params = where(from_micros(a), from_micros(b), tenant)
            rows += read(f"SELECT tenant, ({BUCKET_OF}) AS bucket, COUNT(*) AS requests FROM requests "
                         f"WHERE {clause} AND endpoint IN ({METERED_SQL}) GROUP BY 1, 2", params)
    counts: dict[tuple[str, int], int] = defaultdict(int)
    for row in rows:
        counts[(row["tenant"], int(row["bucket"]))] += int(row["requests"])
    histogram: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for (t, bucket), n in sorted(counts.items()):
        histogram[t].append((bucket, n))
    # For each tenant and percent: (bucket, rank within it), ranks counted from 1.
    wanted = {t: [locate(buckets, (sum(n for _, n in buckets) * int(p) + 99) // 100) for p in percents]
              for t, buckets in histogram.items()}
    if not wanted:
        return {}
    bounds = [int(row["lo"]) for row in read("SELECT lo FROM input_side_bounds ORDER BY lo", ())]
    upper = dict(zip(bounds, [*bounds[1:], None], strict=True))
    # The size ranges wanted, whichever tenant wants them: tenants' medians tend to share
    # buckets, and a plain range test per row is what keeps this scan cheap.
    cells = {(t, b) for t, spots in wanted.items() for b, _ in spots}
    ranges = sorted({b for _, b in cells})
    pick = " OR ".join(f"{INPUT_SIDE} BETWEEN {mark} AND {mark}" for _ in ranges)
    pick_params = [x for b in ranges for x in (b, (upper[b] or 2**63) - 1)]
    clause, params = where(start_from, start_to, tenant)
    values: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for row in read(f"SELECT tenant, {INPUT_SIDE} AS size, COUNT(*) AS requests FROM requests WHERE {clause} "
                    f"AND endpoint IN ({METERED_SQL}) AND ({pick}) "
                    f"GROUP BY 1, 2 ORDER BY 1, 2", (*params, *pick_params)):
        size = int(row["size"])
        cell = (row["tenant"], bounds[bisect_right(bounds, size) - 1])
        if cell in cells:
            values[cell].append((size, int(row["requests"])))
    # A cell whose rows are fewer than the histogram counts lost rows to retention (ledger prune):
    # no exact figure exists, and that tenant's is left out rather than given wrong.
    whole = {cell for cell in cells if sum(n for _, n in values[cell]) == counts[cell]}
    return {t: [locate(values[(t, b)], rank)[0] for b, rank in spots] for t, spots in wanted.items()
            if all((t, b) in whole for b, _ in spots)}


def locate(counts: Sequence[tuple[int, int]], rank: int) -> tuple[int, int]:
    """The (key, rank within key) of the rank-th item, counting from 1, in sorted (key, count) pairs."""
    for key, n in counts:
        if rank <= n:
            return key, rank
        rank -= n
    raise ValueError("rank beyond the counts")
