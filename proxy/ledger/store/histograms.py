"""The histograms the report's percentiles read (migration 015), so no figure of the report
scans the month's requests.

Two tables count requests per period, key and value bucket:
- `speed_histogram`: streamed metered requests with the upstream's own usage and a time to
  first token, per tenant, model (canonical, else requested), tier, input-side band (0
  `lt_32k`, 1 `32k_128k`, 2 `ge_128k`) and measure: 0, the time to first token in ms; 1, the
  output tokens per second after it in hundredths (integer division), over those that ran
  past their first token. Both the `speed` and the `slo` tables come from it.
- `size_histogram`: metered requests per tenant by input-side tokens (the per-tenant p50/p95).

Each request counts in the UTC hour it starts in (span 1) and in its UTC day (span 24, the
day's first hour): a month is read from its whole days, the few hours at its edges (a zone's
month rarely starts at UTC midnight) from the hourly rows, and the part hours of a
half-hour zone from the requests. A few thousand rows, however many requests.

Buckets (`histogram_bounds`): every value below 64 alone, then 16 per doubling up to 2^62
(BOUNDS). A bucket's figure is the harmonic mean of its smallest and largest value,
rounded, which is within ERROR of every value in it; so is a nearest-rank percentile taken
from the histogram, of the exact one. Values below 64 are exact.

SQLite keeps the tables from the writer, per batch (as it keeps the rollup); PostgreSQL
from statement-level triggers. Repricing moves a record's speed counts when it changes its
model or tier (proxy/ledger/store/repricing.py); a prune leaves the tables alone, as it
leaves the rollup. The SQL below is also, verbatim, in the migration files.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from proxy.ledger.store.rows import HOUR_US, Row, SpeedRow, exact, whole_hours
from proxy.ledger.store.slo import BANDS, SloRow
from proxy.ledger.store.sql import INPUT_SIDE, METERED_SQL

EXACT_BELOW = 64
PER_DOUBLING = 16
TOP_POWER = 62


def _bounds() -> tuple[int, ...]:
    out = list(range(EXACT_BELOW))
    j = 0
    while (lo := round(EXACT_BELOW * 2 ** (j / PER_DOUBLING))) < 2**TOP_POWER:
        if lo > out[-1]:
            out.append(lo)
        j += 1
    return tuple(out)


BOUNDS = _bounds()
DAY_HOURS = 24
TTFT, RATE = 0, 1  # speed_histogram.measure

_TIMED = (f"stream = 1 AND usage_source = 'upstream' AND ttft_ms IS NOT NULL "
          f"AND endpoint IN ({METERED_SQL})")
_BAND = f"CASE WHEN {INPUT_SIDE} < 32768 THEN 0 WHEN {INPUT_SIDE} < 131072 THEN 1 ELSE 2 END"
_RATE = "output_tokens * 100000 / (duration_ms - ttft_ms)"
_SPANS = "(SELECT 1 AS span UNION ALL SELECT 24 AS span) AS s"
SPEED_KEY = ("span", "hour", "tenant", "model", "tier", "band", "measure", "bucket")
SIZE_KEY = ("span", "hour", "tenant", "bucket")


def bucket_of(value: str) -> str:
    """The bucket a value counts in: the largest bound at or below it (0 for none)."""
    return f"(SELECT COALESCE(MAX(lo), 0) FROM histogram_bounds WHERE lo <= {value})"


def speed_values(source: str, where: str) -> str:
    """One row per measure of each timed request in `source` matching `where`."""
    key = (f"start / {HOUR_US} AS hour, tenant, COALESCE(model, model_requested, '') AS model, "
           f"COALESCE(tier, '') AS tier, {_BAND} AS band")
    return (f"SELECT {key}, {TTFT} AS measure, {bucket_of('ttft_ms')} AS bucket "
            f"FROM {source} WHERE {where} AND {_TIMED} "
            f"UNION ALL SELECT {key}, {RATE} AS measure, {bucket_of(_RATE)} AS bucket "
            f"FROM {source} WHERE {where} AND {_TIMED} AND duration_ms > ttft_ms")


def size_values(source: str, where: str) -> str:
    return (f"SELECT start / {HOUR_US} AS hour, tenant, {bucket_of(INPUT_SIDE)} AS bucket "
            f"FROM {source} WHERE {where} AND endpoint IN ({METERED_SQL})")


def add_sql(table: str, values: str, sign: str = "") -> str:
    """Upsert `values` (speed_values or size_values) counted into `table`, per hour and per day,
    in key order (PostgreSQL writers then never deadlock); `sign` "-" takes them out instead."""
    key = SPEED_KEY if table == "speed_histogram" else SIZE_KEY
    rest = ", ".join(f"v.{k}" for k in key[2:])
    listed = ", ".join(key)
    order = ", ".join(str(i + 1) for i in range(len(key)))
    return (f"INSERT INTO {table} ({listed}, requests) "
            f"SELECT s.span, v.hour / s.span * s.span, {rest}, {sign}COUNT(*) FROM ({values}) AS v CROSS JOIN {_SPANS} "
            f"WHERE true GROUP BY {order} ORDER BY {order} "
            f"ON CONFLICT ({listed}) DO UPDATE SET requests = {table}.requests + excluded.requests")


# --- reading -------------------------------------------------------------------------------
Read = Callable[[str, tuple[object, ...]], list[Row]]
Where = Callable[[int, int, str | None], tuple[str, tuple[object, ...]]]


@dataclass(frozen=True, slots=True)
class Periods:
    """How a range of microseconds is read: (span, first hour, end hour) rows, and the part
    hours at its edges, [lo, hi) microseconds, from the requests."""

    spans: tuple[tuple[int, int, int], ...]
    partial: tuple[tuple[int, int], ...]


def periods(lo: int, hi: int) -> Periods:
    first, last = whole_hours(lo, hi)
    h0, h1 = first // HOUR_US, last // HOUR_US
    d0, d1 = -(-h0 // DAY_HOURS) * DAY_HOURS, h1 // DAY_HOURS * DAY_HOURS
    spans = ((DAY_HOURS, d0, d1), (1, h0, d0), (1, d1, h1)) if d0 < d1 else ((1, h0, h1),)
    partial = tuple((a, b) for a, b in ((lo, first), (last, hi)) if a < b)
    return Periods(tuple(s for s in spans if s[1] < s[2]), partial)


def counted(read: Read, where: Where, mark: str, table: str, lo: int, hi: int, tenant: str | None,
            keys: tuple[str, ...]) -> dict[tuple[object, ...], int]:
    """Requests per `keys` (ending in bucket) over [lo, hi) microseconds, from `table`'s
    hours and days and the requests of the part hours."""
    p = periods(lo, hi)
    out: dict[tuple[object, ...], int] = defaultdict(int)
    listed = ", ".join(keys)
    if p.spans:
        ranges = " OR ".join(f"(span = {mark} AND hour >= {mark} AND hour < {mark})" for _ in p.spans)
        only = f" AND tenant = {mark}" if tenant is not None else ""
        params = (*(x for s in p.spans for x in s), *((tenant,) if tenant is not None else ()))
        for row in read(f"SELECT {listed}, SUM(requests) AS n FROM {table} WHERE ({ranges}){only} "
                        f"GROUP BY {listed}", params):
            out[tuple(row[k] for k in keys)] += exact(row["n"])
    values, uses = (speed_values, 2) if table == "speed_histogram" else (size_values, 1)
    for a, b in p.partial:
        clause, params = where(a, b, tenant)
        for row in read(f"SELECT {listed}, COUNT(*) AS n FROM ({values('requests', clause)}) AS v "
                        f"GROUP BY {listed}", params * uses):
            out[tuple(row[k] for k in keys)] += exact(row["n"])
    return out


def figure(bucket: int) -> int:
    """The value a bucket stands for: the harmonic mean of its smallest and largest, rounded."""
    i = bisect_right(BOUNDS, bucket) - 1
    lo = BOUNDS[i]
    hi = BOUNDS[i + 1] - 1 if i + 1 < len(BOUNDS) else lo
    return (2 * lo * hi + (lo + hi) // 2) // (lo + hi) if lo else 0


def error_bound() -> float:
    """The largest relative distance from a bucket's figure to a value in it."""
    worst = 0.0
    for i, lo in enumerate(BOUNDS[:-1]):
        if lo:
            hi, f = BOUNDS[i + 1] - 1, figure(lo)
            worst = max(worst, (f - lo) / lo, (hi - f) / hi)
    return worst


ERROR = error_bound()  # 0.0246: the figures' relative error, at most


def percentile(buckets: Sequence[tuple[int, int]], p: int) -> int:
    """The nearest-rank p-th percentile's figure over sorted (bucket, count) pairs."""
    n = sum(c for _, c in buckets)
    rank = (n * p + 99) // 100
    for bucket, c in buckets:
        if rank <= c:
            return figure(bucket)
        rank -= c
    raise ValueError("rank beyond the counts")


def by_key(counts: dict[tuple[object, ...], int], split: int) -> dict[tuple[object, ...], list[tuple[int, int]]]:
    """counts keyed (k..., bucket) as sorted (bucket, count) pairs per key[:split]."""
    out: dict[tuple[object, ...], list[tuple[int, int]]] = defaultdict(list)
    for key, n in counts.items():
        if n:
            out[key[:split]].append((_int(key[split]), n))
    for pairs in out.values():
        pairs.sort()
    return out


def slo_rows(counts: dict[tuple[object, ...], int]) -> list[SloRow]:
    """The slo table from speed counts keyed (model, tier, band, measure, bucket)."""
    ttft = by_key({(*k[:3], k[4]): n for k, n in counts.items() if k[3] == TTFT}, 3)
    rate = by_key({(*k[:3], k[4]): n for k, n in counts.items() if k[3] == RATE}, 3)
    out = []
    for key, values in ttft.items():
        rates = rate.get(key, [])
        timed = sum(c for _, c in rates)
        r50, r95 = ((percentile(rates, p) / 100 if timed else None) for p in (50, 95))
        out.append(SloRow(str(key[0]), str(key[1]), BANDS[_int(key[2])], sum(c for _, c in values),
                          percentile(values, 50), percentile(values, 95), timed, r50, r95))
    return sorted(out, key=lambda r: (r.model, r.tier, r.band))


def speed_rows(counts: dict[tuple[object, ...], int]) -> list[SpeedRow]:
    """The speed table from speed counts keyed (model, tier, measure, bucket): every band."""
    ttft = by_key({(*k[:2], k[3]): n for k, n in counts.items() if k[2] == TTFT}, 2)
    rate = by_key({(*k[:2], k[3]): n for k, n in counts.items() if k[2] == RATE}, 2)
    out = []
    for key, values in ttft.items():
        rates = rate.get(key, [])
        median = percentile(rates, 50) / 100 if rates else 0.0
        out.append(SpeedRow(str(key[0]), str(key[1]), sum(c for _, c in values), median,
                            percentile(values, 50), percentile(values, 95)))
    return sorted(out, key=lambda r: (r.model, r.tier))


def size_percentiles(counts: dict[tuple[object, ...], int], percents: Sequence[int]) -> dict[str, list[int]]:
    """Per tenant, the input-side percentiles from size counts keyed (tenant, bucket)."""
    return {str(t[0]): [percentile(pairs, p) for p in percents] for t, pairs in by_key(counts, 1).items()}


def _int(v: object) -> int:
    if isinstance(v, int):
        return v
    raise TypeError(f"expected an integer key, got {v!r}")
