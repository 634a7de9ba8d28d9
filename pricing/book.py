"""Which price applies to a request: model, tier and entry resolution (SPEC "Price tables")."""

from __future__ import annotations

import fnmatch
import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from pricing.model import BUILTIN_TIER_ALIASES, Price, is_glob

STANDARD = "standard"
_MEMO_NAME = 256  # longer names are matched against the globs every time, never kept


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
        self._names: dict[str, str] = {}  # exact names, lower-cased -> canonical model
        named_tiers: dict[str, set[str]] = {}  # exact name -> tiers of the entries that list it in `match`
        globs: dict[str, tuple[str, set[str], int]] = {}  # glob, lower-cased -> (model, tiers, order)
        self._entries: dict[tuple[str, str], list[Price]] = {}
        self._first: dict[tuple[str, str], datetime] = {}  # (model, tier) -> its earliest effective_from
        for p in self.prices:
            self._names.setdefault(p.model.lower(), p.model)
            for name in p.match:
                key = name.lower()
                if is_glob(name):
                    globs.setdefault(key, (p.model, set(), len(globs)))[1].add(p.tier)
                else:
                    self._names.setdefault(key, p.model)
                    named_tiers.setdefault(key, set()).add(p.tier)
            self._entries.setdefault((p.model, p.tier), []).append(p)
            self._first.setdefault((p.model, p.tier), p.effective_from)
        # A name implies a tier only when every entry listing it has that same tier.
        self._name_tier = {n: next(iter(t)) for n, t in named_tiers.items() if len(t) == 1}
        # Globs, compiled once, the longest first (the most specific), then the one seen first.
        self._globs: tuple[tuple[Callable[[str], re.Match[str] | None], str, str | None], ...] = tuple(
            (re.compile(fnmatch.translate(g)).match, model, next(iter(tiers)) if len(tiers) == 1 else None)
            for g, (model, tiers, _) in sorted(globs.items(), key=lambda kv: (-len(kv[0]), kv[1][2])))
        self._matched: dict[str, tuple[str, str | None] | None] = {}  # names from clients: bounded
        self.models: frozenset[str] = frozenset(p.model for p in self.prices)
        self._instants = [p.effective_from for p in self.prices]  # sorted
        self._resolved: dict[tuple[str, str, str | None, str | None, int], Resolution | None] = {}

    def tiers(self, model: str) -> frozenset[str]:
        return frozenset(t for (m, t) in self._entries if m == model)

    def canonical_model(self, response_model: str | None, requested_model: str | None) -> str | None:
        """Step 1: the response's model if a table knows it, else the request's, else None."""
        for name in (response_model, requested_model):
            if name:
                found = self._lookup(name)
                if found is not None:
                    return found[0]
        return None

    def _lookup(self, name: str) -> tuple[str, str | None] | None:
        """The model a name means and the tier it implies (None: none): an exact name first, then
        the globs. The name is only ever a name: `*`, `?` or `[` in it are matched literally."""
        key = name.lower()
        model = self._names.get(key)
        if model is not None:
            return model, self._name_tier.get(key)
        if not self._globs:
            return None
        try:
            return self._matched[key]
        except KeyError:
            pass
        found = next(((m, tier) for match, m, tier in self._globs if match(key)), None)
        if len(key) <= _MEMO_NAME:
            if len(self._matched) >= 4096:  # names come from clients: bound the memo
                self._matched.clear()
            self._matched[key] = found
        return found

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
            found = self._lookup(model_name)
            if found is not None and found[1] is not None:
                return found[1]
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

    def epoch(self, at: datetime) -> int:
        """How many entries' effective_from have passed at `at`: which entries are in force
        depends on nothing else, so callers may key their own memos by it."""
        return bisect_right(self._instants, at)

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
