"""Which price applies to a request: model, tier and entry resolution (SPEC "Price tables")."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from pricing.calculator import Units, unit_prices
from pricing.model import BUILTIN_TIER_ALIASES, Price

STANDARD = "standard"


@dataclass(frozen=True, slots=True)
class Resolution:
    price: Price
    tier_fallback: bool  # the request's tier has no entry: priced at standard instead


class PriceBook:
    """All price entries, indexed for the per-request lookups. Immutable once built."""

    def __init__(self, prices: Iterable[Price], aliases: Mapping[str, str] | None = None) -> None:
        self.prices: tuple[Price, ...] = tuple(sorted(prices, key=lambda p: p.effective_from))
        self.aliases = {**BUILTIN_TIER_ALIASES, **{k.lower(): v for k, v in (aliases or {}).items()}}
        self._names: dict[str, str] = {}  # any matching name, lower-cased -> canonical model
        named_tiers: dict[str, set[str]] = {}  # name -> tiers of the entries that list it in `match`
        self._entries: dict[tuple[str, str], list[Price]] = {}
        for p in self.prices:
            self._names.setdefault(p.model.lower(), p.model)
            for name in p.match:
                self._names.setdefault(name.lower(), p.model)
                named_tiers.setdefault(name.lower(), set()).add(p.tier)
            self._entries.setdefault((p.model, p.tier), []).append(p)
        # A name implies a tier only when every entry listing it has that same tier.
        self._name_tier = {n: next(iter(t)) for n, t in named_tiers.items() if len(t) == 1}
        self.models: frozenset[str] = frozenset(p.model for p in self.prices)
        self._instants = [p.effective_from for p in self.prices]  # sorted
        self._memo: dict[tuple[str, str, str | None, int], tuple[Resolution, Units] | None] = {}

    def tiers(self, model: str) -> frozenset[str]:
        return frozenset(t for (m, t) in self._entries if m == model)

    def canonical_model(self, response_model: str | None, requested_model: str | None) -> str | None:
        """Step 1: the response's model if a table knows it, else the request's, else None."""
        for name in (response_model, requested_model):
            if name:
                model = self._names.get(name.lower())
                if model is not None:
                    return model
        return None

    def resolve_tier(self, model_name: str | None, hints: Iterable[str | None]) -> str:
        """Step 2: the first tier hint (response speed/service_tier, then the request's)
        through the aliases; else the tier the model name implies; else standard."""
        for hint in hints:
            if hint:
                h = hint.strip().lower()
                return self.aliases.get(h, h)
        if model_name:
            tier = self._name_tier.get(model_name.lower())
            if tier is not None:
                return tier
        return STANDARD

    def resolve(self, model: str, tier: str, at: datetime, upstream: str | None = None) -> Resolution | None:
        """Step 3: the latest entry in force at `at`; standard (flagged) when the tier has none."""
        price = self._latest(model, tier, at, upstream)
        if price is not None:
            return Resolution(price, tier_fallback=False)
        if tier != STANDARD:
            price = self._latest(model, STANDARD, at, upstream)
            if price is not None:
                return Resolution(price, tier_fallback=True)
        return None

    def resolve_units(self, model: str, tier: str, at: datetime,
                      upstream: str | None = None) -> tuple[Resolution, Units] | None:
        """resolve(), with the unit prices, memoised: which entries are in force at `at` depends
        only on how many effective_from instants have passed, so that count keys the memo."""
        key = (model, tier, upstream, bisect_right(self._instants, at))
        if key in self._memo:
            return self._memo[key]
        found = self.resolve(model, tier, at, upstream)
        value = None if found is None else (found, unit_prices(found.price))
        if len(self._memo) >= 4096:  # tiers come from clients: bound the memo
            self._memo.clear()
        self._memo[key] = value
        return value

    def in_force(self, at: datetime) -> list[Price]:
        """For each (model, tier, upstream), the entry that applies at `at`."""
        current: dict[tuple[str, str, str | None], Price] = {}
        for p in self.prices:  # sorted by effective_from: later entries replace earlier ones
            if p.effective_from <= at:
                current[(p.model, p.tier, p.upstream)] = p
        return list(current.values())

    def _latest(self, model: str, tier: str, at: datetime, upstream: str | None) -> Price | None:
        best: Price | None = None
        specific: Price | None = None
        for p in self._entries.get((model, tier), ()):
            if p.effective_from > at:
                break
            if p.upstream is None:
                best = p
            elif p.upstream == upstream:
                specific = p
        # An entry naming the request's upstream wins over the general one.
        return specific or best
