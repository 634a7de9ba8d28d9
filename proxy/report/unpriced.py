"""The report's `unpriced_estimated` section (SPEC "Monthly report", version 3): the month's
requests whose cost is unknown (no price when they were written) or rests on estimated usage,
their tokens, and what they would cost at the nearest known price.

The nearest known price of an unpriced request:
- its model, when the price tables know it now (tables updated since it was written): the
  entry of its tier (else standard) in force when it started, or, when the model's first entry
  came later, that first entry;
- else the model of its family: the name cut back at a separator (`-`, `.`, `_`, `:`, `@`,
  `/`), the longest cut first, that the tables name, or under which every name the tables know
  belongs to one model (`claude-sonnet-4-5-20991231` is priced as `claude-sonnet-4-5`; after
  `provider/`, the name without it is tried the same way);
- else none: `gpt-9` is not priced at some other gpt. Those requests are counted, not priced.
Prices are an entry's base prices: a long-context band is not applied (the rows are hourly sums,
not single requests), so for a request past a band the figure is a lower bound.

An estimated request is priced already (its cost is in the report's totals); the section shows
its count, tokens and that cost apart, because the usage behind it was counted by llmmeter,
not reported by the upstream.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from pricing import PriceBook
from pricing.book import Resolution
from pricing.calculator import rates
from pricing.model import is_glob
from proxy.ledger.store import Store
from proxy.ledger.store.base import SqlStore
from proxy.ledger.store.rows import to_micros
from proxy.ledger.store.unpriced_report import UncertainRow, uncertain_rows
from proxy.report.model import UncertainModelRow, UnpricedEstimated

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_CUT = re.compile(r"[-._:@/]")


class Nearest:
    """Nearest known prices from one price book, each name worked out once."""

    def __init__(self, book: PriceBook) -> None:
        self.book = book
        self._known: dict[str, set[str]] = {}  # every exact name the tables know, lower-cased -> models
        self._first: dict[str, datetime] = {}  # model -> its earliest entry's effective_from
        for p in book.prices:
            for name in (p.model, *(m for m in p.match if not is_glob(m))):
                self._known.setdefault(name.lower(), set()).add(p.model)
            self._first.setdefault(p.model, p.effective_from)
        self._models: dict[str, str | None] = {}

    def model(self, name: str) -> str | None:
        """The price-table model nearest to a name, None when there is none."""
        key = name.strip().lower()
        if key not in self._models:
            self._models[key] = self._find(key)
        return self._models[key]

    def _find(self, name: str) -> str | None:
        if not name:
            return None
        tried = [name] + ([name.rsplit("/", 1)[1]] if "/" in name else [])
        for candidate in tried:
            for prefix in _prefixes(candidate):
                found = self.book.canonical_model(prefix, None)
                if found is not None:
                    return found
                family = {m for known, models in self._known.items() if _under(known, prefix) for m in models}
                if len(family) == 1:
                    return family.pop()
        return None

    def price(self, model: str, tier: str, upstream: str, at: datetime) -> Resolution | None:
        """The entry of `model` at `tier` (else standard) in force at `at`, else its first one."""
        tier = tier or "standard"
        found = self.book.resolve(model, tier, at, upstream=upstream or None)
        first = self._first.get(model)
        if found is None and first is not None and first > at:
            found = self.book.resolve(model, tier, first, upstream=upstream or None)
        return found


def _prefixes(name: str) -> list[str]:
    """The name, then the name cut at each separator, the longest first: a-b-c, a-b, a."""
    cuts = [m.start() for m in _CUT.finditer(name)]
    return [name, *(name[:i] for i in reversed(cuts) if i > 0)]


def _under(known: str, prefix: str) -> bool:
    """Whether a known name continues `prefix` after a separator (claude-3-5-sonnet-2024 under claude-3-5-sonnet)."""
    return len(known) > len(prefix) and known.startswith(prefix) and _CUT.match(known, len(prefix)) is not None


def unpriced_estimated(store: Store, book: PriceBook, start: datetime, end: datetime, tenant: str | None,
                       any_uncertain: bool) -> UnpricedEstimated:
    """The section for [start, end); `any_uncertain` False (the hourly rows count no unpriced and
    no estimated request) skips reading the requests."""
    if not any_uncertain:
        return UnpricedEstimated()
    if not isinstance(store, SqlStore):
        raise TypeError(f"unpriced and estimated requests are read from an SQL ledger, not {type(store).__name__}")
    return summarise(uncertain_rows(store, to_micros(start), to_micros(end), tenant), Nearest(book))


def summarise(rows: list[UncertainRow], nearest: Nearest) -> UnpricedEstimated:
    groups: dict[tuple[str, str, str], list[UncertainRow]] = {}
    for row in rows:
        groups.setdefault((row.model, row.tier, row.upstream), []).append(row)
    models = [_model_row(key, found, nearest) for key, found in groups.items()]
    models.sort(key=lambda x: (-x.requests, x.model, x.tier, x.upstream))
    return UnpricedEstimated(
        requests=sum(x.requests for x in models), tokens=sum(x.tokens for x in models),
        cost_at_nearest_units=sum(x.cost_at_nearest_units or 0 for x in models),
        unpriced_requests=sum(r.requests for r in rows if r.unpriced),
        unpriced_tokens=sum(r.tokens for r in rows if r.unpriced),
        unpriced_without_price_requests=sum(x.unpriced_requests for x in models if x.cost_at_nearest_units is None),
        estimated_requests=sum(r.requests for r in rows if r.estimated),
        estimated_tokens=sum(r.tokens for r in rows if r.estimated),
        estimated_cost_units=sum(r.cost_units for r in rows if r.estimated),
        models=tuple(models))


def _model_row(key: tuple[str, str, str], rows: list[UncertainRow], nearest: Nearest) -> UncertainModelRow:
    model, tier, upstream = key
    unpriced = [r for r in rows if r.unpriced]
    target = nearest.model(model) if unpriced else None
    used_tier: str | None = None
    at_nearest: int | None = sum(r.cost_units for r in rows)
    for r in unpriced:
        found = nearest.price(target, tier, upstream, _EPOCH + timedelta(hours=r.hour)) if target else None
        if found is None or at_nearest is None:
            at_nearest = None
            continue
        used_tier = found.price.tier
        at_nearest += rates(found.price)[0].units(
            input=r.input_tokens, cache_read=r.cache_read_tokens, cache_write=r.cache_write_tokens,
            cache_write_1h=r.cache_write_1h_tokens, output=r.output_tokens, web_search_calls=r.web_search_calls)
    return UncertainModelRow(
        model=model, tier=tier, upstream=upstream, requests=sum(r.requests for r in rows),
        tokens=sum(r.tokens for r in rows), unpriced_requests=sum(r.requests for r in unpriced),
        estimated_requests=sum(r.requests for r in rows if r.estimated), cost_units=sum(r.cost_units for r in rows),
        nearest_model=target if at_nearest is not None else None,
        nearest_tier=used_tier if at_nearest is not None else None, cost_at_nearest_units=at_nearest)
