"""Which price applies to a request: model, tier and entry resolution (SPEC "Price tables")."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from pricing.model import BUILTIN_TIER_ALIASES, Price

STANDARD = "standard"


# Anthropic's usage.inference_geo values that mean no regional premium.
UNPREMIUMED_GEOS = frozenset({"global", "not_available"})


@dataclass(frozen=True, slots=True)
class Resolution:
    price: Price
    tier_fallback: bool  # the request's tier has no entry: priced at standard instead
    geo_unpriced: bool = False  # the request's inference_geo has no entry: priced at the one without


class PriceBook:
    """All price entries, indexed for the per-request lookups. Immutable once built."""

    def __init__(self, prices: Iterable[Price], aliases: Mapping[str, str] | None = None) -> None:
        self.prices: tuple[Price, ...] = tuple(sorted(prices, key=lambda p: p.effective_from))
        self.aliases = {**BUILTIN_TIER_ALIASES, **{k.lower(): v for k, v in (aliases or {}).items()}}
        self._names: dict[str, str] = {}  # any matching name, lower-cased -> canonical model
        named_tiers: dict[str, set[str]] = {}  # name -> tiers of the entries that list it in `match`
        self._entries: dict[tuple[str, str], list[Price]] = {}
        self._first: dict[tuple[str, str], datetime] = {}  # (model, tier) -> its earliest effective_from
        for p in self.prices:
            self._names.setdefault(p.model.lower(), p.model)
            for name in p.match:
                self._names.setdefault(name.lower(), p.model)
                named_tiers.setdefault(name.lower(), set()).add(p.tier)
            self._entries.setdefault((p.model, p.tier), []).append(p)
            self._first.setdefault((p.model, p.tier), p.effective_from)
        # A name implies a tier only when every entry listing it has that same tier.
        self._name_tier = {n: next(iter(t)) for n, t in named_tiers.items() if len(t) == 1}
        self.models: frozenset[str] = frozenset(p.model for p in self.prices)
        self._instants = [p.effective_from for p in self.prices]  # sorted
        self._resolved: dict[tuple[str, str, str | None, str | None, int], Resolution | None] = {}

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

    def resolve_tier(self, model_name: str | None, hints: Iterable[str | None], model: str | None = None,
                     at: datetime | None = None) -> str:
        """Step 2: the first tier hint (response speed/service_tier, then the request's): as it is
        when `model` (canonical) has an entry of that tier in force at `at` (any time when None),
        else through the aliases; with no hint, the tier the model name implies; else standard."""
        for hint in hints:
            if hint:
                h = hint.strip().lower()
                if model is not None:
                    first = self._first.get((model, h))
                    if first is not None and (at is None or first <= at):
                        return h
                return self.aliases.get(h, h)
        if model_name:
            tier = self._name_tier.get(model_name.lower())
            if tier is not None:
                return tier
        return STANDARD

    def resolve(self, model: str, tier: str, at: datetime, upstream: str | None = None,
                geo: str | None = None) -> Resolution | None:
        """Step 3: the latest entry in force at `at`; standard (flagged) when the tier has none.
        With a geo, an entry naming that inference_geo wins; else the entry naming none (flagged
        geo_unpriced unless the geo carries no premium). Memoised: which entries are in force at
        `at` depends only on how many effective_from instants have passed."""
        g = geo.strip().lower() if geo else None
        key = (model, tier, upstream, g, bisect_right(self._instants, at))
        try:
            return self._resolved[key]
        except KeyError:
            pass
        found = self._resolve(model, tier, at, upstream, g)
        if len(self._resolved) >= 4096:  # tiers and geos come from clients: bound the memo
            self._resolved.clear()
        self._resolved[key] = found
        return found

    def _resolve(self, model: str, tier: str, at: datetime, upstream: str | None, geo: str | None
                 ) -> Resolution | None:
        for t, fallback in ((tier, False), (STANDARD, True)):
            if fallback and tier == STANDARD:
                break
            if geo:
                price = self._latest(model, t, at, upstream, geo)
                if price is not None:
                    return Resolution(price, tier_fallback=fallback)
            price = self._latest(model, t, at, upstream, None)
            if price is not None:
                return Resolution(price, tier_fallback=fallback,
                                  geo_unpriced=bool(geo) and geo not in UNPREMIUMED_GEOS)
        return None

    def in_force(self, at: datetime) -> list[Price]:
        """For each (model, tier, upstream, inference_geo), the entry that applies at `at`."""
        current: dict[tuple[str, str, str | None, str | None], Price] = {}
        for p in self.prices:  # sorted by effective_from: later entries replace earlier ones
            if p.effective_from <= at:
                current[(p.model, p.tier, p.upstream, p.inference_geo)] = p
        return list(current.values())

    def _latest(self, model: str, tier: str, at: datetime, upstream: str | None, geo: str | None
                ) -> Price | None:
        best: Price | None = None
        specific: Price | None = None
        for p in self._entries.get((model, tier), ()):
            if p.effective_from > at:
                break
            if p.inference_geo != geo:
                continue
            if p.upstream is None:
                best = p
            elif p.upstream == upstream:
                specific = p
        # An entry naming the request's upstream wins over the general one.
        return specific or best
