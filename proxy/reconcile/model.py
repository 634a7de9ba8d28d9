"""What a reconciliation compares and finds: the provider's figures as read from its pages,
and rows of llmmeter against the provider with their differences (SPEC "Reconciliation").

Tokens are integers; dollars are Decimal, read from the pages' text and from the ledger's
integer units, never through a float.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date
from decimal import Context, Decimal, localcontext

from pricing import BUILTIN_TIER_ALIASES

# Amounts a page may carry: at most 10^12 to 24 decimal places, so sums and differences of any
# month (36 digits each) stay exact in 80.
EXACT = Context(prec=80)

Key = tuple[date, str, str]  # UTC day, model, tier ("" where the source gives no tier)
CATEGORIES = ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")
UNKNOWN_MODEL = "(model not given)"
ALL_MODELS = "(all models)"
NOT_PER_MODEL = "(not per model)"

# Tier names as the providers spell them, made llmmeter's: OpenAI's `default`/`auto` and no
# tier at all are the standard tier; Anthropic's on-demand priority and discounted flex are
# billed in those tiers.
_TIER_NAMES = {"": "standard", "default": "standard", "auto": "standard", "standard": "standard",
               "priority_on_demand": "priority", "flex_discount": "flex"}


def tier_name(tier: str | None) -> str:
    t = (tier or "").strip().lower()
    return _TIER_NAMES.get(t, t)


class TierNames:
    """Tiers compared by what they mean, shown as the provider spells them.

    The ledger keeps the tier llmmeter resolved: a model with no `priority` price is billed, and
    recorded, at `highspeed` (the tier aliases), where OpenAI's and Anthropic's pages still say
    `priority`. Both sides go through the same aliases; a row is named by the provider's spelling
    when the provider used one spelling for that meaning (else by the alias target)."""

    def __init__(self, aliases: Mapping[str, str], provider_tiers: Iterable[str]) -> None:
        self._aliases = {**BUILTIN_TIER_ALIASES, **{k.lower(): v for k, v in aliases.items()}}
        spellings: dict[str, set[str]] = {}
        for t in provider_tiers:
            spellings.setdefault(self._meaning(t), set()).add(t)
        self._shown = {m: next(iter(s)) for m, s in spellings.items() if len(s) == 1}

    def _meaning(self, tier: str) -> str:
        t = tier_name(tier)
        return self._aliases.get(t, t)

    def __call__(self, tier: str | None) -> str:
        meaning = self._meaning(tier or "")
        return self._shown.get(meaning, meaning)


@dataclass(slots=True)
class Counts:
    """Tokens per billing category: input is uncached input; cache writes are 5-minute plus 1-hour."""

    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0

    def add(self, other: Counts) -> None:
        self.input_tokens += other.input_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.cache_write_tokens += other.cache_write_tokens
        self.output_tokens += other.output_tokens

    def get(self, name: str) -> int:
        value: int = getattr(self, name)
        return value


@dataclass(slots=True)
class ProviderData:
    """A month of the provider's usage and cost, keyed by day, model and tier."""

    provider: str  # "openai" | "anthropic"
    has_tier: bool  # the usage is split by tier
    has_usage: bool = False  # usage pages were read (else tokens are not compared)
    has_cost: bool = False  # cost pages were read (else dollars are not compared)
    usage: dict[Key, Counts] = field(default_factory=dict)
    usd: dict[Key, Decimal] = field(default_factory=dict)  # dollars per day, model and tier (Anthropic)
    day_usd: dict[date, Decimal] = field(default_factory=dict)  # dollars per day not split by model
    day_usd_is_total: bool = False  # OpenAI: the day's figure is every cost; Anthropic: only non-token costs
    outside_month: int = 0  # buckets read that lie outside the month, left out
    pages: int = 0
    label: str = ""  # how the output names the source ("openai", "anthropic (saved pages ...)")

    def add_usage(self, key: Key, counts: Counts) -> None:
        self.usage.setdefault(key, Counts()).add(counts)

    def add_usd(self, key: Key, amount: Decimal) -> None:
        with localcontext(EXACT):
            self.usd[key] = self.usd.get(key, Decimal(0)) + amount

    def add_day_usd(self, day: date, amount: Decimal) -> None:
        with localcontext(EXACT):
            self.day_usd[day] = self.day_usd.get(day, Decimal(0)) + amount


@dataclass(frozen=True, slots=True)
class Measure:
    """One figure of a row on both sides. `provider` None: the source does not give it at this level."""

    name: str  # a CATEGORIES name or "cost_usd"
    llmmeter: Decimal | int
    provider: Decimal | int | None

    @property
    def difference(self) -> Decimal | int | None:
        with localcontext(EXACT):
            return None if self.provider is None else self.llmmeter - self.provider

    @property
    def pct(self) -> Decimal | None:
        """(llmmeter − provider) ÷ provider × 100, to 0.01; None when it has no value (nothing from
        the provider, or the provider said 0 and llmmeter did not)."""
        if self.provider is None or (self.provider == 0 and self.llmmeter != 0):
            return None
        if self.provider == 0:
            return Decimal("0.00")
        with localcontext(EXACT):
            return (Decimal(self.llmmeter - self.provider) * 100 / Decimal(self.provider)).quantize(Decimal("0.01"))

    def exceeds(self, threshold_pct: Decimal) -> bool:
        if self.provider is None or self.llmmeter == self.provider:
            return False
        if self.provider == 0:
            return True
        with localcontext(EXACT):
            return abs(Decimal(self.llmmeter - self.provider)) * 100 > threshold_pct * abs(Decimal(self.provider))


@dataclass(slots=True)
class Row:
    """One UTC day and model (and tier) — or, for dollars the source gives per day only, one day."""

    day: date
    model: str
    tier: str
    scope: str  # "model" | "day"
    measures: list[Measure]
    requests: int = 0  # llmmeter's
    estimated: int = 0
    unpriced: int = 0
    exceeds: bool = False
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RequestDiff:
    """One request whose cost in llmmeter differs from the one its upstream reported."""

    id: str
    start: str  # RFC 3339
    upstream: str
    model: str
    cost_usd: Decimal | None  # None: unpriced in llmmeter
    provider_cost_usd: Decimal

    @property
    def difference(self) -> Decimal | None:
        return None if self.cost_usd is None else self.cost_usd - self.provider_cost_usd


@dataclass(slots=True)
class Reconciliation:
    month: str
    source: str  # openai | anthropic | provider_cost, or "openai (saved pages)" ...
    threshold_pct: Decimal
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # said once, above the rows
    requests: list[RequestDiff] = field(default_factory=list)  # provider_cost only
    compared_requests: int = 0  # provider_cost only: requests that carried a provider cost

    @property
    def exceeding(self) -> int:
        return sum(1 for r in self.rows if r.exceeds)
