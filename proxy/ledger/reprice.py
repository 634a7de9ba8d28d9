"""`llmmeter reprice`: price ledger records with the entries in force at their start (SPEC
"Price tables, version 2").

Each record is resolved exactly as the meter resolves a request (proxy/metering/meter.py
`model_and_tier`, `price_record`), from what the record kept: its response and requested
model names, its tier (the hint; `batch` for batch results), its upstream and its token
counts. Without `--apply` nothing is written: the command prints, per model, the rows and
dollars that would change. With `--apply` the changes are written a chunk at a time, each
chunk in one transaction that holds the ledger's write lock and moves the hourly rollup with
the records (proxy/ledger/store/repricing.py), so the report stays equal to a sum over `export`.

Rules: a record no entry prices now keeps what it has (a repricing never unprices); with
`--only-unpriced` only records with no cost (or priced by an earlier repricing, flagged
`priced_later`) are looked at; without it a priced record whose price would change is listed
by id, and written only with `--apply`. A changed record is flagged `repriced` (and
`priced_later` when it had no cost), and the flags that describe its price (tier_fallback,
geo_unpriced, cache_ttl_unpriced, fee_unpriced, pricing_failed) are those of its new price.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TextIO
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pricing import PriceBook, default_tables_dir, load_dir
from pricing.calculator import Tokens, price_tokens
from proxy import settings as config
from proxy.budget.unseen import OVER_RESERVATION, USAGE_UNSEEN
from proxy.budget.unseen import settle as settle_budget
from proxy.errors import ConfigError
from proxy.ledger.record import Record
from proxy.ledger.retention import months_of
from proxy.ledger.store import SqliteStore, SqlStore, open_store
from proxy.ledger.store.repricing import PRICED_LATER, REPRICED
from proxy.ledger.store.rows import to_micros
from proxy.metering.meter import PRICING_FAILED, model_and_tier, price_record
from proxy.protocol.usage import Usage
from proxy.report.numbers import money
from proxy.times import parse_when, rfc3339

CHUNK = 1000  # records per read, and per transaction with --apply
SQLITE_YIELD_S = 0.1
SHOWN_PRICED = 50  # priced records listed one by one; the rest counted
# Flags that describe a record's price, not its usage: a repricing sets them anew.
PRICE_FLAGS = frozenset({"tier_fallback", "geo_unpriced", "cache_ttl_unpriced", "fee_unpriced", PRICING_FAILED,
                         OVER_RESERVATION, USAGE_UNSEEN})
GEO_UNPRICED = "geo_unpriced"


@dataclass(frozen=True, slots=True)
class Change:
    old: Record
    new: Record


@dataclass(slots=True)
class ModelSums:
    rows: int = 0
    were_unpriced: int = 0
    were_priced: int = 0
    before_units: int = 0  # the changed rows' costs before (unpriced: 0)
    after_units: int = 0


@dataclass(slots=True)
class Summary:
    """What a repricing found (and, with apply, wrote)."""

    examined: int = 0
    changed: dict[str, ModelSums] = field(default_factory=dict)  # by model
    priced_changes: list[Change] = field(default_factory=list)  # the first SHOWN_PRICED
    priced_changed: int = 0
    still_unpriced: dict[str, int] = field(default_factory=dict)  # by the name the record has
    kept_priced: int = 0  # priced records no entry prices now: left as they are
    failed: int = 0  # the calculator refused (a count or price out of range): left as they are

    def add(self, change: Change) -> None:
        old, new = change.old, change.new
        sums = self.changed.setdefault(new.model or "", ModelSums())
        sums.rows += 1
        sums.before_units += old.cost_units or 0
        sums.after_units += new.cost_units or 0
        if old.cost_units is None:
            sums.were_unpriced += 1
        else:
            sums.were_priced += 1
            self.priced_changed += 1
            if len(self.priced_changes) < SHOWN_PRICED:
                self.priced_changes.append(change)

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.changed.values())

    @property
    def delta_units(self) -> int:
        return sum(s.after_units - s.before_units for s in self.changed.values())


def reprice_record(book: PriceBook, rec: Record) -> Record | None:
    """The record priced with the entry in force at its start, or None when nothing would change
    (no entry prices it now, or the price is the one it has). Raises what the calculator refuses."""
    model, tier = model_and_tier(book, rec.endpoint, rec.response_model, rec.model_requested, (rec.tier,),
                                 rec.start)
    if model is None or tier is None:
        return None
    new = replace(rec, flags=[f for f in rec.flags if f not in PRICE_FLAGS and f not in (REPRICED, PRICED_LATER)],
                  model=model, tier=tier)
    usage = Usage(rec.input_tokens, rec.cache_read_tokens, rec.cache_write_tokens, rec.output_tokens,
                  rec.reasoning_tokens, cache_write_1h_tokens=rec.cache_write_1h_tokens,
                  web_search_calls=rec.web_search_calls)
    if price_record(book, new, model, tier, rec.start, rec.upstream, usage, _geo(book, rec)) is None:
        return None
    if GEO_UNPRICED in rec.flags and GEO_UNPRICED not in new.flags and _entry_geo(book, new) is None:
        new.flags.append(GEO_UNPRICED)  # its geo is not kept, only that no entry named it
    # As the meter does: the budget's overrun follows the price, and a request whose usage was
    # unseen never costs less than its reservation (proxy/budget/unseen.py).
    settle_budget(new)
    if _priced_as(new) == _priced_as(rec):
        return None
    new.flags.append(REPRICED)
    if rec.cost_units is None or PRICED_LATER in rec.flags:
        new.flags.append(PRICED_LATER)
    return new


def _priced_as(r: Record) -> tuple[object, ...]:
    return (r.model, r.tier, r.price_model, r.price_tier, r.price_effective_from, r.cost_units, r.fee_units,
            r.price_band, frozenset(f for f in r.flags if f not in (REPRICED, PRICED_LATER)))


def _entry_geo(book: PriceBook, rec: Record) -> str | None:
    for p in book.prices:
        if (p.model, p.tier, p.effective_from) == (rec.price_model, rec.price_tier, rec.price_effective_from) \
                and p.upstream in (None, rec.upstream) and p.inference_geo is not None:
            return p.inference_geo
    return None


def _geo(book: PriceBook, rec: Record) -> str | None:
    """The ledger keeps no inference_geo: a record priced at an entry naming one (the one its
    entry, tokens and cost agree with) is repriced at that geo; any other at the entry naming none."""
    if rec.cost_units is None or rec.price_effective_from is None:
        return None
    tokens = Tokens(rec.input_tokens, rec.cache_read_tokens, rec.cache_write_tokens, rec.output_tokens,
                    rec.cache_write_1h_tokens, rec.web_search_calls)
    same = [p for p in book.prices
            if (p.model, p.tier, p.effective_from) == (rec.price_model, rec.price_tier, rec.price_effective_from)
            and p.upstream in (None, rec.upstream)]
    geos = {p.inference_geo for p in same}
    if geos <= {None}:
        return None
    for p in same:
        try:
            if p.inference_geo is not None and price_tokens(p, tokens).cost.total == rec.cost_units:
                return p.inference_geo
        except ValueError:
            continue
    return None


def run(store: SqlStore, book: PriceBook, start: datetime, end: datetime, *, only_unpriced: bool = False,
        apply: bool = False) -> Summary:
    """Reprice [start, end) a chunk at a time; write only with apply, each chunk in one locked
    transaction with its hours' rollup summed again. The summary says what changed (or would)."""
    summary = Summary()
    after: tuple[int, str] | None = None
    while True:
        batch = store.reprice_candidates(start, end, after, only_unpriced, CHUNK)  # no lock
        if apply and _any_change(book, batch):
            # Read again under the lock (an import may have added to the chunk meanwhile), then write.
            with store.repricing() as tx:
                batch = tx.candidates(start, end, after, only_unpriced, CHUNK)
                changes = _examine(book, batch, summary)
                if changes:
                    tx.update([c.new for c in changes])
                    tx.adjust([(c.old, c.new) for c in changes])
            if isinstance(store, SqliteStore):
                # SQLite grants its lock to whoever asks first, and a waiting import polls it every
                # 100 ms: leave it that long after each write, or a long repricing starves the
                # importer of a running `serve`. (PostgreSQL queues lock requests in order.)
                time.sleep(SQLITE_YIELD_S)
        else:
            changes = _examine(book, batch, summary)
        for c in changes:  # counted once written (or, in a dry run, once found)
            summary.add(c)
        if len(batch) < CHUNK:
            return summary
        after = (to_micros(batch[-1].start), batch[-1].id)


def _any_change(book: PriceBook, batch: list[Record]) -> bool:
    for rec in batch:
        try:
            if reprice_record(book, rec) is not None:
                return True
        except Exception:  # counted when the chunk is examined
            continue
    return False


def _examine(book: PriceBook, batch: list[Record], summary: Summary) -> list[Change]:
    changes: list[Change] = []
    for rec in batch:
        summary.examined += 1
        try:
            new = reprice_record(book, rec)
        except Exception:  # a count or price the calculator refuses: the record stays as it is
            summary.failed += 1
            continue
        if new is not None:
            changes.append(Change(rec, new))
        elif rec.cost_units is None:
            name = rec.model or rec.model_requested or rec.response_model or "(no model)"
            summary.still_unpriced[name] = summary.still_unpriced.get(name, 0) + 1
        elif _unpriced_now(book, rec):
            summary.kept_priced += 1
    return changes


def _unpriced_now(book: PriceBook, rec: Record) -> bool:
    try:
        model, tier = model_and_tier(book, rec.endpoint, rec.response_model, rec.model_requested, (rec.tier,),
                                     rec.start)
        return model is None or tier is None or book.resolve(model, tier, rec.start, rec.upstream or None) is None
    except Exception:
        return True


# --- the command ---------------------------------------------------------------------------

def command(args: argparse.Namespace) -> int:
    """`llmmeter reprice --from WHEN --to WHEN [--tz] [--only-unpriced] [--apply] [--db] [--config] [--prices]`."""
    try:
        tz = ZoneInfo(args.tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"unknown time zone {args.tz!r} (use an IANA name like America/Sao_Paulo)") from None
    start, end = parse_when(args.start, tz), parse_when(args.end, tz)
    if end <= start:
        raise ConfigError("--to must be after --from (it is exclusive)")
    overrides = {k: v for k, v in (("db", args.db), ("prices", args.prices)) if v is not None}
    s = config.load(args.config or config.default_config_path(), overrides=overrides)
    book = PriceBook(load_dir(s.prices_dir or default_tables_dir()), dict(s.tier_aliases))
    # Opened read-only first: a missing, outdated or newer ledger is refused before anything is
    # written (reprice never creates or migrates a ledger).
    store = open_store(s.ledger_url, read_only=True)
    if args.apply:
        store = open_store(s.ledger_url)
    # The months stay whole while they are repriced: `ledger prune` leaves a month in use alone.
    with store.months_in_use(months_of(start, end)):
        summary = run(store, book, start, end, only_unpriced=args.only_unpriced, apply=args.apply)
    write_summary(summary, start, end, args.only_unpriced, args.apply, sys.stdout)
    return 0


def write_summary(s: Summary, start: datetime, end: datetime, only_unpriced: bool, applied: bool,
                  out: TextIO) -> None:
    which = "records unpriced when written" if only_unpriced else "every priced and unpriced record"
    out.write(f"reprice [{rfc3339(start)}, {rfc3339(end)}): {s.examined:,} billed records examined ({which})\n")
    verb = "changed" if applied else "would change"
    if not s.changed:
        out.write(f"no record's price {verb}\n")
    else:
        out.write(f"\n{'model':<32} {'rows':>8} {'unpriced':>9} {'priced':>8} {'before':>16} {'after':>16} "
                  f"{'change':>16}\n")
        for model, m in sorted(s.changed.items()):
            out.write(f"{model or '(none)':<32} {m.rows:>8,} {m.were_unpriced:>9,} {m.were_priced:>8,} "
                      f"{money(m.before_units):>16} {money(m.after_units):>16} "
                      f"{_signed(m.after_units - m.before_units):>16}\n")
        before = sum(m.before_units for m in s.changed.values())
        after = sum(m.after_units for m in s.changed.values())
        out.write(f"{'total':<32} {s.rows:>8,} {sum(m.were_unpriced for m in s.changed.values()):>9,} "
                  f"{s.priced_changed:>8,} {money(before):>16} {money(after):>16} {_signed(after - before):>16}\n")
        out.write(f"\n{s.rows:,} rows {verb}, {_signed(s.delta_units)} in total\n")
    if s.priced_changes:
        out.write(f"\npriced records whose price {verb} ({s.priced_changed:,}"
                  + (f", the first {len(s.priced_changes)} listed" if s.priced_changed > len(s.priced_changes)
                     else "") + "):\n")
        for c in s.priced_changes:
            o, n = c.old, c.new
            out.write(f"  {o.id} {rfc3339(o.start, 'milliseconds')} {n.model}: {money(o.cost_units or 0)} "
                      f"({o.price_tier} from {_day(o.price_effective_from)}) -> {money(n.cost_units or 0)} "
                      f"({n.price_tier} from {_day(n.price_effective_from)})\n")
    if s.still_unpriced:
        left = sum(s.still_unpriced.values())
        names = ", ".join(f"{k} ({v:,})" for k, v in sorted(s.still_unpriced.items(), key=lambda kv: (-kv[1], kv[0])))
        out.write(f"\n{left:,} records still unpriced (no entry in force at their start): {names}\n")
    if s.kept_priced:
        out.write(f"{s.kept_priced:,} priced records have no entry in force now: kept as they are\n")
    if s.failed:
        out.write(f"{s.failed:,} records could not be priced (a count or price out of range): kept as they are\n")
    if applied:
        out.write("written, with the hourly rollup of every hour they start in\n" if s.changed else "")
    elif s.changed:
        out.write("nothing written: run again with --apply to write these changes\n")


def _signed(units: int) -> str:
    return ("+" if units > 0 else "") + money(units)


def _day(t: datetime | None) -> str:
    return "-" if t is None else t.date().isoformat()
