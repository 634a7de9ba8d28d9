"""The same model at other providers (SPEC "Self-hosting, version 2" → `alternatives`).

The month's traffic of a model, category by category, priced as genai-prices' own
`calc_price` prices it for each equivalent provider model, at the end of the month. The
calculation is genai-prices', not llmmeter's: its Usage counts every input-side token in
`input_tokens` and prices cache reads and writes inside it where the provider has a price
for them. A category with tokens that the provider does not price is named in
`missing_categories` (genai-prices then charges it at the provider's input price; it is
never guessed here). genai-prices is the optional `llmmeter[prices]` extra: without it the
section says so and holds no rows.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

# SPEC: `provider_id:model`, model as calc_price matches it for that provider (genai-prices 0.2.5).
DEFAULT_EQUIVALENTS: Mapping[str, tuple[str, ...]] = {
    "kimi-k3.1-pro": (
        "fireworks:accounts/fireworks/models/kimi-k3p1-pro",
        "together:moonshotai/Kimi-K3.1-Pro",
        "novita:moonshotai/kimi-k3.1-pro",
        "modal:moonshotai/Kimi-K3.1-Pro",
        "doubleword:moonshotai/Kimi-K3.1-Pro",
        "openrouter:moonshotai/kimi-k3.1-pro",
        "quicksilverpro:kimi-k3.1-pro",
        "aws:global.moonshotai.kimi-k3.1",
    ),
}
# The four billing categories (SPEC), with the genai-prices price field each needs.
_CATEGORIES = (("input", "input_mtok"), ("cache_read", "cache_read_mtok"),
               ("cache_write", "cache_write_mtok"), ("output", "output_mtok"))


@dataclass(frozen=True, slots=True)
class Tokens:
    """A month's tokens of one model: uncached input, cache reads, cache writes (both lifetimes), output."""

    input: int = 0
    cache_read: int = 0
    cache_write: int = 0
    output: int = 0

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(self.input + other.input, self.cache_read + other.cache_read,
                      self.cache_write + other.cache_write, self.output + other.output)


@dataclass(frozen=True, slots=True)
class Alternative:
    provider: str
    provider_model: str
    cost_usd: Decimal | None  # None: genai-prices could not price it (see `problem`)
    missing_categories: tuple[str, ...]
    price_date: date | None  # the start of the price in force, where genai-prices dates it
    problem: str | None = None


def parse_equivalent(entry: str) -> tuple[str, str]:
    """`provider_id:model` → (provider_id, model); the model may itself hold colons."""
    provider, sep, model = entry.partition(":")
    if not sep or not provider or not model:
        raise ValueError(f"{entry!r} is not provider_id:model (e.g. \"together:moonshotai/Kimi-K3.1-Pro\")")
    return provider, model


def price_alternatives(tokens: Tokens, entries: Iterable[str], at: datetime) -> list[Alternative]:
    """Each equivalent priced for `tokens` at `at`, cheapest first; unpriceable ones last."""
    try:
        import genai_prices
    except ImportError:
        return []
    usage = genai_prices.Usage(input_tokens=tokens.input + tokens.cache_read + tokens.cache_write,
                               cache_read_tokens=tokens.cache_read, cache_write_tokens=tokens.cache_write,
                               output_tokens=tokens.output)
    out = [_one(genai_prices, usage, tokens, *parse_equivalent(e), at) for e in entries]
    return sorted(out, key=lambda a: (a.cost_usd is None, a.cost_usd or 0, a.provider))


def available() -> bool:
    try:
        import genai_prices  # noqa: F401
    except ImportError:
        return False
    return True


def _one(genai_prices: Any, usage: Any, tokens: Tokens, provider: str, model: str, at: datetime) -> Alternative:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # genai-prices warns on keys it does not price: reported below
            found = genai_prices.calc_price(usage, model, provider_id=provider, genai_request_timestamp=at)
    except LookupError as e:
        return Alternative(provider, model, None, (), None, f"genai-prices has no such model: {e}")
    price = found.model_price
    missing = tuple(name for name, field in _CATEGORIES
                    if getattr(tokens, name) and getattr(price, field, None) is None)
    return Alternative(provider, model, Decimal(found.total_price), missing, _start_date(found.model, at))


def _start_date(model: Any, at: datetime) -> date | None:
    """The start of the dated price in force at `at`; None where the model has one undated price."""
    prices: Sequence[Any] | Any = model.prices
    if not isinstance(prices, list):
        return None
    best: date | None = None
    for conditional in prices:
        start = getattr(getattr(conditional, "constraint", None), "start_date", None)
        if start is None:
            continue
        day = start.date() if isinstance(start, datetime) else start
        if day <= at.date() and (best is None or day > best):
            best = day
    return best


@dataclass(frozen=True, slots=True)
class ModelAlternatives:
    """One model's month at the API beside the same traffic at each equivalent provider."""

    model: str
    tokens: Tokens
    api_cost_units: int  # as billed in the ledger, 10^-10 USD (priced requests only)
    api_unpriced_requests: int  # requests the ledger could not price: api_cost_units is then a lower bound
    rows: tuple[Alternative, ...]


def alternatives_for(by_model: Iterable[Any], configured: Sequence[tuple[str, tuple[str, ...]]],
                     self_hosted: frozenset[str], at: datetime) -> tuple[ModelAlternatives, ...]:
    """For each model with equivalents (the configured ones, else the shipped ones) that has API
    traffic in `by_model` (the report's ModelRow rows, self-hosted upstreams left out): its tokens of
    every tier, what the API billed for them, and the equivalents priced for those tokens."""
    equivalents = dict(configured) if configured else dict(DEFAULT_EQUIVALENTS)
    tokens: dict[str, Tokens] = {}
    billed: dict[str, tuple[int, int]] = {}
    for row in by_model:
        if row.model not in equivalents or row.upstream in self_hosted:
            continue
        u = row.usage
        tokens[row.model] = tokens.get(row.model, Tokens()) + Tokens(
            u.input_tokens, u.cache_read_tokens, u.cache_write_tokens + u.cache_write_1h_tokens, u.output_tokens)
        units, unpriced = billed.get(row.model, (0, 0))
        billed[row.model] = (units + u.cost_units, unpriced + u.unpriced_requests)
    return tuple(ModelAlternatives(m, tokens[m], *billed[m], tuple(price_alternatives(tokens[m], equivalents[m], at)))
                 for m in sorted(tokens))


def cheapest_provider(models: Sequence[ModelAlternatives], api_units: int) -> Alternative | None:
    """The provider that would cost least for this month's API traffic: the models it serves moved
    to it (at its cheapest equivalent of each), the rest left on the API as billed. None: no
    provider priced any model."""
    best: Alternative | None = None
    for provider in sorted({a.provider for m in models for a in m.rows if a.cost_usd is not None}):
        cost, moved = Decimal(0), 0
        names: list[str] = []
        missing: set[str] = set()
        dates: set[date | None] = set()
        for m in models:
            priced = [a for a in m.rows if a.provider == provider and a.cost_usd is not None]
            if not priced:
                continue
            a = min(priced, key=lambda x: x.cost_usd or 0)
            cost += a.cost_usd or 0
            moved += m.api_cost_units
            names.append(a.provider_model)
            missing.update(a.missing_categories)
            dates.add(a.price_date)
        total = cost + Decimal(api_units - moved) / 10**10
        if best is None or total < (best.cost_usd or 0):
            best = Alternative(provider, ", ".join(names), total, tuple(sorted(missing)),
                               dates.pop() if len(dates) == 1 else None)
    return best
