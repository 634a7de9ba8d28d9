"""Retention: the per-request rows of whole past UTC months deleted, their hourly rollups kept.

`llmmeter ledger prune --before YYYY-MM [--apply]` (a dry run without --apply) and, in
`serve`, `[ledger] keep_requests_months` once a day. The rules:

- whole UTC months only, the rollup's own hours, so a month's totals and breakdowns from
  the rollup are exactly what they were;
- never the current UTC month or a later one;
- never a month a running `reprice` or `reconcile` holds: they hold each UTC month they use
  (SqlStore.months_in_use: flock'd lock files beside a SQLite ledger, advisory locks on
  PostgreSQL, both gone with a process that dies) and a prune claims a month exclusively
  without waiting, so a month in use is skipped and said so;
- each pruned month is written to `pruned_months` (migration 012), for the report to say
  which of its figures need the rows that are gone.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TextIO

from proxy import settings as config
from proxy.errors import ConfigError
from proxy.ledger.store import SqlStore, open_store
from proxy.ledger.store.rows import from_micros, to_micros

log = logging.getLogger("llmmeter.ledger")

DAY_S = 24 * 3600.0
COMMAND = "llmmeter ledger prune"


@dataclass(frozen=True, slots=True)
class MonthPruned:
    month: str  # YYYY-MM, UTC
    rows: int  # rows deleted (or, in a dry run or while in use, that would be)
    in_use: bool  # a reprice or reconcile holds it: left alone


def parse_month(text: str, flag: str = "--before") -> tuple[int, int]:
    try:
        d = datetime.strptime(text.strip(), "%Y-%m")
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: use YYYY-MM, e.g. 2026-09") from None
    if d.year < 1971:
        raise ConfigError(f"{flag} {text!r}: a year from 1971 on")
    return d.year, d.month


def label(year: int, month: int) -> str:
    return f"{year:04d}-{month:02d}"


def following(year: int, month: int) -> tuple[int, int]:
    return (year + 1, 1) if month == 12 else (year, month + 1)


def months_back(year: int, month: int, n: int) -> tuple[int, int]:
    index = year * 12 + month - 1 - n
    return index // 12, index % 12 + 1


def bounds_us(year: int, month: int) -> tuple[int, int]:
    """The UTC month as [first, following) microseconds since the epoch."""
    ny, nm = following(year, month)
    return to_micros(datetime(year, month, 1, tzinfo=UTC)), to_micros(datetime(ny, nm, 1, tzinfo=UTC))


def months_of(start: datetime, end: datetime) -> list[str]:
    """The UTC months that [start, end) overlaps, for SqlStore.months_in_use."""
    first, last = start.astimezone(UTC), from_micros(to_micros(end) - 1)
    y, m, out = first.year, first.month, []
    while (y, m) <= (last.year, last.month):
        out.append(label(y, m))
        y, m = following(y, m)
    return out


def _months_from(first_us: int, before: tuple[int, int]) -> Iterator[tuple[int, int]]:
    first = from_micros(first_us)
    y, m = first.year, first.month
    while (y, m) < before:
        yield y, m
        y, m = following(y, m)


def prune(store: SqlStore, before: str, *, apply: bool, now: datetime | None = None) -> list[MonthPruned]:
    """Each UTC month before `before` that holds per-request rows: deleted with `apply`, else only counted."""
    now = (now or datetime.now(UTC)).astimezone(UTC)
    limit = parse_month(before)
    if limit > (now.year, now.month):
        raise ConfigError(f"--before {before}: after the current month {label(now.year, now.month)} (UTC); "
                          "the current month and later ones are never pruned")
    oldest = store.oldest_start_us()
    if oldest is None:
        return []
    out = []
    for y, m in _months_from(oldest, limit):
        lo, hi = bounds_us(y, m)
        rows = store.count(from_micros(lo), from_micros(hi), None)
        if not rows:
            continue
        name = label(y, m)
        if not apply:
            out.append(MonthPruned(name, rows, store.month_in_use(name)))
            continue
        deleted = store.prune_month(name, lo, hi, to_micros(now))
        out.append(MonthPruned(name, rows if deleted is None else deleted, deleted is None))
        if deleted is not None:
            log.info("ledger: pruned %d per-request row(s) of %s (UTC); its hourly rollup stays", deleted, name)
        else:
            log.warning("ledger: %s not pruned: a reprice or reconcile is using it", name)
    return out


def write_summary(results: Sequence[MonthPruned], before: str, applied: bool, out: TextIO) -> None:
    if not results:
        out.write(f"no per-request rows before {before} (UTC): nothing to prune\n")
        return
    verb = "deleted" if applied else "would delete"
    for r in results:
        if r.in_use:
            out.write(f"{r.month}: {r.rows:,} rows, in use by a reprice or reconcile: left alone\n")
        else:
            out.write(f"{r.month}: {verb} {r.rows:,} per-request rows; the hourly rollup stays\n")
    if not applied:
        out.write("dry run: nothing deleted (--apply deletes)\n")


def command(args: argparse.Namespace) -> int:
    """`llmmeter ledger prune --before YYYY-MM [--apply] [--db] [--config]`; exit 1 when a month was in use."""
    parse_month(args.before)
    s = config.load(args.config or config.default_config_path(), overrides={"db": args.db} if args.db else {})
    # Read-only first: a missing, outdated or newer ledger is refused before anything is written
    # (prune never creates or migrates a ledger); the dry run never writes at all.
    store = open_store(s.ledger_url, read_only=True)
    if args.apply:
        store = open_store(s.ledger_url)
    results = prune(store, args.before, apply=args.apply)
    write_summary(results, args.before, args.apply, sys.stdout)
    return 1 if any(r.in_use for r in results) else 0


class Pruner(threading.Thread):
    """`[ledger] keep_requests_months` in `serve`: at start, then once a day, the per-request rows of
    months before the last `keep` whole months (and the current one) are deleted."""

    def __init__(self, store: SqlStore, keep: int, interval_s: float = DAY_S) -> None:
        super().__init__(name="llmmeter-ledger-retention", daemon=True)
        self.store, self.keep, self.interval_s = store, keep, interval_s
        self._stopping = threading.Event()

    def run(self) -> None:
        while not self._stopping.is_set():
            try:
                now = datetime.now(UTC)
                before = label(*months_back(now.year, now.month, self.keep))
                prune(self.store, before, apply=True, now=now)
            except Exception:  # a failed prune is tried again tomorrow; it never stops serving
                log.exception("ledger: keep_requests_months prune failed; tried again in a day")
            self._stopping.wait(self.interval_s)

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        if self.is_alive():
            self.join(timeout)
