"""The month's load by the minute (SPEC "Self-hosting, version 2", `load_by_minute`).

The ledger keeps per-UTC-minute sums (migration 013, proxy/ledger/store/minutes.py); here
they become the four loads of each minute of the month (the month so far while it runs),
idle minutes counting as 0, and their nearest-rank p50, p95, p99 and maximum. Values stay
exact fractions until a format rounds them (to 0.01), so `nodes` divides exact figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from zoneinfo import ZoneInfo

from proxy.ledger.store import MinuteLoad, Store
from proxy.ledger.store.minutes import MILLI, MINUTE_US
from proxy.ledger.store.rows import to_micros

PERCENTS = (50, 95, 99)
# SPEC names, and how each comes from a minute's sums: (its sum, the divisor giving the load).
FIGURES: dict[str, tuple[str, int]] = {
    "requests_in_flight": ("busy_us", MINUTE_US),  # microseconds in flight / a minute's
    "prefill_tokens_per_s": ("prefill_mtokens", MILLI * 60),
    "decode_tokens_per_s": ("decode_mtokens", MILLI * 60),
    "kv_tokens_in_flight": ("kv_token_ms", 60_000),  # token-milliseconds / a minute's
}
# Off-peak: every minute but the busiest 5%, so a few bursts do not make the month look busy.
OFFPEAK_SHARE = Fraction(95, 100)


@dataclass(frozen=True, slots=True)
class LoadFigure:
    p50: Fraction = Fraction(0)
    p95: Fraction = Fraction(0)
    p99: Fraction = Fraction(0)
    max: Fraction = Fraction(0)


@dataclass(frozen=True, slots=True)
class LoadByMinute:
    requests_in_flight: LoadFigure = LoadFigure()
    prefill_tokens_per_s: LoadFigure = LoadFigure()
    decode_tokens_per_s: LoadFigure = LoadFigure()
    kv_tokens_in_flight: LoadFigure = LoadFigure()
    minutes: int = 0  # how many minutes the percentiles are over, idle ones included
    peak_minute: datetime | None = None  # the minute with the most KV tokens in flight, in the report's zone
    peak_to_offpeak_ratio: float | None = None  # None: the off-peak minutes had no load at all
    # The minutes with any load, as the table keeps them: cost_curve's utilisation is a mean over them.
    rows: tuple[MinuteLoad, ...] = field(default=(), repr=False, compare=False)

    def figure(self, name: str) -> LoadFigure:
        value: LoadFigure = getattr(self, name)
        return value


def load_by_minute(store: Store, start: datetime, end: datetime, now: datetime, tz: ZoneInfo,
                   tenant: str | None) -> LoadByMinute:
    """Over the minutes that start in [start, min(end, now)): a month in progress counts so far."""
    stop = min(end, max(now, start))
    lo, hi = -(-to_micros(start) // MINUTE_US), -(-to_micros(stop) // MINUTE_US)
    n = max(0, hi - lo)
    if n == 0:
        return LoadByMinute()
    rows = store.minute_load(start, stop, tenant)
    figures = {name: _figure([getattr(row, column) for row in rows], n, divisor)
               for name, (column, divisor) in FIGURES.items()}
    peak = max(rows, key=lambda row: (row.kv_token_ms, -row.minute), default=None)
    peak_at = None
    if peak is not None and peak.kv_token_ms > 0:
        peak_at = datetime.fromtimestamp(peak.minute * 60, UTC).astimezone(tz)
    return LoadByMinute(**figures, minutes=n, peak_minute=peak_at,
                        peak_to_offpeak_ratio=_peak_to_offpeak(rows, n), rows=tuple(rows))


def _figure(values: list[int], n: int, divisor: int) -> LoadFigure:
    """Nearest-rank percentiles over n minutes: the given values and n - len(values) idle zeros."""
    ordered = sorted(values)
    idle = n - len(ordered)

    def ranked(rank: int) -> Fraction:  # 1-based, over all n minutes in ascending order
        return Fraction(0) if rank <= idle else Fraction(ordered[rank - idle - 1], divisor)

    p50, p95, p99 = (ranked(max(1, -(-p * n // 100))) for p in PERCENTS)
    return LoadFigure(p50, p95, p99, ranked(n))


def _peak_to_offpeak(rows: list[MinuteLoad], n: int) -> float | None:
    """The busiest minute's KV tokens in flight over the mean of the off-peak minutes (all but
    the busiest 5%, idle ones included)."""
    ordered = [0] * (n - len(rows)) + sorted(row.kv_token_ms for row in rows)
    kept = ordered[:max(1, int(n * OFFPEAK_SHARE))]
    offpeak = Fraction(sum(kept), len(kept))
    return float(ordered[-1] / offpeak) if offpeak else None
