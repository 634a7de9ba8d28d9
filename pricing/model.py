"""The price entry: one model, one tier, one effective date, four prices (SPEC "Price tables")."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

# The four billing categories, in the order tables, metrics and reports list them.
TOKEN_TYPES: tuple[str, ...] = ("input", "cache_read", "cache_write", "output")

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
