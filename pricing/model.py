"""The price entry: one model, one tier, one effective date, four prices (SPEC "Price tables")."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

# The four required prices of an entry, in the order tables list them.
TOKEN_TYPES: tuple[str, ...] = ("input", "cache_read", "cache_write", "output")
# Every billing category a record has (version 2 adds 1-hour cache writes), as metrics and
# reports list them.
BILLING_TYPES: tuple[str, ...] = ("input", "cache_read", "cache_write", "cache_write_1h", "output")
FEE_TYPES: tuple[str, ...] = ("web_search",)

# Tier names as providers spell them, mapped to the tiers price tables use.
BUILTIN_TIER_ALIASES: dict[str, str] = {
    "default": "standard",
    "auto": "standard",
    "standard": "standard",
    "standard_only": "standard",
    "fast": "highspeed",
    "priority": "highspeed",
    "highspeed": "highspeed",
}

_GLOB_CHARS = frozenset("*?[")


def is_glob(name: str) -> bool:
    """Whether a `match` item is a case-insensitive fnmatch glob (it has `*`, `?` or `[`) rather
    than an exact model name."""
    return not _GLOB_CHARS.isdisjoint(name)


@dataclass(frozen=True, slots=True)
class Band:
    """A long-context band: above this many input-side tokens the whole request is priced here.
    A price left out (None) keeps the entry's base price."""

    above_input_tokens: int
    input: Decimal | None = None
    output: Decimal | None = None
    cache_read: Decimal | None = None
    cache_write: Decimal | None = None
    cache_write_1h: Decimal | None = None
    line: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens, exact. Published entries never change; a new price is a new entry."""

    model: str
    tier: str
    effective_from: datetime  # UTC, timezone-aware
    input: Decimal
    output: Decimal
    cache_read: Decimal
    cache_write: Decimal
    source: str
    match: tuple[str, ...] = ()
    upstream: str | None = None  # None: applies to every upstream
    # Version 2 (SPEC "Price tables, version 2"): optional, never inherited from another entry.
    cache_write_1h: Decimal | None = None  # None: 1h writes priced at cache_write, flagged
    web_search_per_1k: Decimal | None = None  # USD per 1,000 calls; None with calls: flagged
    bands: tuple[Band, ...] = ()  # ascending above_input_tokens
    inference_geo: str | None = None  # Anthropic usage.inference_geo this entry prices
    file: str = field(default="", compare=False)
    line: int = field(default=0, compare=False)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def per_million(self, token_type: str) -> Decimal:
        if token_type not in TOKEN_TYPES:
            raise KeyError(token_type)
        value: Decimal = getattr(self, token_type)
        return value
