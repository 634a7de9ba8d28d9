"""The counter series llmmeter can name before any request: created at 0 on start.

A labelled counter that appears with its first increment has no earlier sample, so
increase() and rate() cannot see that first step (an unpriced call would read as 0). The
configuration names most series in advance; this module lists them, bounded by it:

- tokens and cost: each priced (model, tier) that an upstream's `models` globs route, for
  each tenant, for each billing type (cost also for each fee type). An upstream without
  `models` routes anything, so it adds no model here: those series are born with their
  first call, and the dashboards' range queries count that first call themselves.
- reasoning tokens: those (model, tier) pairs, for each tenant; fees: those models, for each
  tenant and fee type; the provider's cost and llmmeter's of the same calls: those models, for
  each tenant; estimated calls: those models and `other`; unpriced calls: `other` (a model
  with a price entry is never unpriced).
- cost by tag and workload: each declared tag and `other`, for each workload class and `other`.
- upstream failures: each upstream, for each kind.
- live load (in flight seconds, prefill and decode tokens, KV token-seconds): those models and `other`.

Wide globs over the shipped tables name hundreds of models; past MAX_SERIES the per-model
series are left to be born with their first call (and serve says so), so /metrics stays small.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fnmatch import fnmatchcase

from pricing import PriceBook
from pricing.model import BILLING_TYPES, FEE_TYPES
from proxy.protocol.names import UPSTREAM_ERROR_KINDS, WORKLOADS
from proxy.settings import Settings

OTHER = "other"
MAX_SERIES = 2_000  # the example configuration makes 510; `gpt-*` alone over the shipped tables ~9,000
Key = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Known:
    tokens: tuple[Key, ...]  # (model, tier, tenant, type)
    cost: tuple[Key, ...]  # (model, tier, tenant, type): billing types and fee types
    reasoning: tuple[Key, ...]  # (model, tier, tenant)
    fees: tuple[Key, ...]  # (model, tenant, fee)
    provider: tuple[Key, ...]  # (model, tenant): llmmeter_provider_cost_usd and _costed_usd each
    tagged: tuple[Key, ...]  # (tag, workload)
    estimated: tuple[Key, ...]  # (model,)
    unpriced: tuple[Key, ...]  # (model,)
    upstream_errors: tuple[Key, ...]  # (upstream, kind)
    load: tuple[Key, ...] = ()  # (model,): each of the four live load counters
    over_cap: int = 0  # when the per-model series were left out: how many they would have been

    def count(self) -> int:
        return sum(len(keys) for keys in (self.tokens, self.cost, self.reasoning, self.fees, self.provider,
                                          self.provider, self.tagged, self.estimated, self.unpriced,
                                          self.upstream_errors)) + 4 * len(self.load)


def routed_models(settings: Settings, book: PriceBook) -> list[str]:
    """The priced models some upstream's `models` globs name, sorted."""
    globs = [g for u in settings.upstreams for g in u.models]
    return sorted(m for m in book.models if any(fnmatchcase(m, g) for g in globs))


def tenants(settings: Settings) -> list[str]:
    """Who can spend: the configured tenants, or `default` when there are none."""
    return sorted(t.name for t in settings.tenants) or ["default"]


def known_series(settings: Settings, book: PriceBook, cap: int = MAX_SERIES) -> Known:
    known = _named(settings, book, routed_models(settings, book))
    if known.count() <= cap:
        return known
    fixed = _named(settings, book, [])
    return replace(fixed, over_cap=known.count())


def _named(settings: Settings, book: PriceBook, models: list[str]) -> Known:
    who = tenants(settings)
    pairs = [(m, t) for m in models for t in sorted(book.tiers(m))]
    return Known(
        tokens=tuple((m, t, n, k) for m, t in pairs for n in who for k in BILLING_TYPES),
        cost=tuple((m, t, n, k) for m, t in pairs for n in who for k in (*BILLING_TYPES, *FEE_TYPES)),
        reasoning=tuple((m, t, n) for m, t in pairs for n in who),
        fees=tuple((m, n, f) for m in models for n in who for f in FEE_TYPES),
        provider=tuple((m, n) for m in models for n in who),
        tagged=tuple((t, w) for t in [*settings.tags, OTHER] for w in [*WORKLOADS, OTHER]),
        estimated=tuple((m,) for m in [*models, OTHER]),
        unpriced=((OTHER,),),
        upstream_errors=tuple((u.name, k) for u in settings.upstreams for k in UPSTREAM_ERROR_KINDS),
        load=tuple((m,) for m in [*models, OTHER]),
    )
