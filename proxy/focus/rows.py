"""Ledger records summed into FOCUS charge rows: one per UTC day × upstream × model × tier × tenant ×
tag × price entry and band × category (a token category, or the web search fee).

A record's cost is split over its categories as the calculator split it when it was priced
(pricing.calculator.split at the record's band of its price entry), so a row's cost is the sum of
its records' shares in exact 10^-10 USD units and the rows of a record add up to its cost exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from pricing import PriceBook
from pricing.calculator import Cost, Rates, rates, split
from pricing.model import Price
from proxy.ledger.record import Record

# The categories a row can be, in the order the calculator splits a cost.
CATEGORIES = ("input", "cache_read", "cache_write", "cache_write_1h", "output", "web_search")
ALL_TOKENS = "tokens"  # a priced record whose price entry is no longer in the tables: one row for its tokens
_DAY = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class Key:
    day: datetime  # UTC midnight
    upstream: str
    model: str
    tier: str | None
    tenant: str
    tag: str | None
    category: str
    price: Price | None  # None: unpriced, or the entry is not in the tables
    price_effective_from: datetime | None
    band: int | None
    unpriced: bool


@dataclass(slots=True)
class FocusRow:
    key: Key
    quantity: int = 0  # tokens, or web search calls
    cost_units: int = 0  # 10^-10 USD, exact

    @property
    def list_unit_price(self) -> Decimal | None:
        """USD per 1,000,000 tokens, or per 1,000 calls, at this row's entry and band; None when unknown."""
        k = self.key
        if k.price is None or k.unpriced:
            return None
        return list_price(k.price, k.band or 0, k.category)


def focus_rows(records: Iterable[Record], book: PriceBook) -> list[FocusRow]:
    """Every record's categories, summed by Key, ordered by day, then the rest of the key."""
    entries = _Entries(book)
    rows: dict[Key, FocusRow] = {}
    for r in records:
        for key, quantity, units in _shares(r, entries):
            row = rows.get(key)
            if row is None:
                row = rows[key] = FocusRow(key)
            row.quantity += quantity
            row.cost_units += units
    return sorted(rows.values(), key=_order)


def _order(row: FocusRow) -> tuple[object, ...]:
    k = row.key
    return (k.day, k.upstream, k.model, k.tier or "", k.tenant, k.tag or "", k.price_effective_from or k.day,
            k.band or 0, CATEGORIES.index(k.category) if k.category in CATEGORIES else -1)


def _shares(r: Record, entries: _Entries) -> Iterator[tuple[Key, int, int]]:
    """(key, quantity, cost units) for each category of one record with something to show."""
    counts = (r.input_tokens, r.cache_read_tokens, r.cache_write_tokens, r.cache_write_1h_tokens,
              r.output_tokens, r.web_search_calls)
    utc = r.start.astimezone(UTC)
    day = datetime(utc.year, utc.month, utc.day, tzinfo=UTC)
    model = r.model or r.model_requested or ""
    base = dict(day=day, upstream=r.upstream, model=model, tier=r.tier, tenant=r.tenant, tag=r.tag,
                price_effective_from=r.price_effective_from, band=r.price_band)
    if r.cost_units is None:  # unpriced: the usage is shown, at no cost
        for category, n in zip(CATEGORIES, counts, strict=True):
            if n:
                yield Key(category=category, price=None, unpriced=True, **base), n, 0  # type: ignore[arg-type]
        return
    price = entries.find(r)
    level = None if price is None else _level(price, r.price_band or 0)
    if price is None or level is None:
        tokens = sum(counts[:5])
        fee = r.fee_units or 0
        if tokens or r.cost_units - fee:
            yield Key(category=ALL_TOKENS, price=None, unpriced=False, **base), tokens, r.cost_units - fee  # type: ignore[arg-type]
        if r.web_search_calls or fee:
            yield Key(category="web_search", price=None, unpriced=False, **base), r.web_search_calls, fee  # type: ignore[arg-type]
        return
    for category, n, units in zip(CATEGORIES, counts, _split(r, level), strict=True):
        if n or units:
            unpriced_fee = category == "web_search" and price.web_search_per_1k is None
            yield Key(category=category, price=price, unpriced=unpriced_fee, **base), n, units  # type: ignore[arg-type]


def _split(r: Record, level: Rates) -> tuple[int, ...]:
    """The record's cost per category as the calculator split it. Anything the split at one level does
    not reproduce (a request priced in parts at several bands) goes to its largest token share, so the
    shares always add up to the record's cost."""
    c: Cost = split(r.input_tokens * level.input, r.cache_read_tokens * level.cache_read,
                    r.cache_write_tokens * level.cache_write, r.output_tokens * level.output,
                    r.cache_write_1h_tokens * level.cache_write_1h, r.web_search_calls * (level.fee or 0))
    fee = r.fee_units or 0
    shares = [c.input, c.cache_read, c.cache_write, c.cache_write_1h, c.output, fee]
    rest = (r.cost_units or 0) - sum(shares)
    if rest:
        biggest = max(range(5), key=lambda i: shares[i])
        shares[biggest] += rest
    return tuple(shares)


def _level(price: Price, band: int) -> Rates | None:
    return next((level for level in rates(price) if level.above == band), None)


def list_price(price: Price, band: int, category: str) -> Decimal | None:
    """The entry's published price for a category at a band: USD per 1,000,000 tokens, or per 1,000 web searches."""
    if category == "web_search":
        return price.web_search_per_1k
    found = next((b for b in price.bands if b.above_input_tokens == band), None) if band else None
    if category == "cache_write_1h":  # as the calculator: without a 1-hour price, the level's cache_write
        one_hour = found.cache_write_1h if found is not None and found.cache_write_1h is not None \
            else price.cache_write_1h
        return one_hour if one_hour is not None else list_price(price, band, "cache_write")
    if category not in ("input", "cache_read", "cache_write", "output"):
        return None
    over = None if found is None else getattr(found, category)
    value: Decimal = over if over is not None else getattr(price, category)
    return value


class _Entries:
    """The price entry a record was priced at, by (model, tier, effective_from); an entry for the
    record's own upstream first, then one for every upstream, then one without an inference_geo."""

    def __init__(self, book: PriceBook) -> None:
        self.by: dict[tuple[str, str, datetime], list[Price]] = {}
        for p in book.prices:
            self.by.setdefault((p.model, p.tier, p.effective_from), []).append(p)

    def find(self, r: Record) -> Price | None:
        if r.price_model is None or r.price_tier is None or r.price_effective_from is None:
            return None
        found = self.by.get((r.price_model, r.price_tier, r.price_effective_from.astimezone(UTC)))
        if not found:
            return None
        return min(found, key=lambda p: (p.upstream != r.upstream, p.upstream is not None, p.inference_geo is not None))


def day_end(day: datetime) -> datetime:
    return day + _DAY
