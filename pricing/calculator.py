"""Exact cost arithmetic: integers of 10^-10 USD, so sums never drift.

A price has at most 4 decimal places per million tokens, so one token costs
price × 10^4 units exactly, and a cost is tokens × that integer: no rounding anywhere.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from decimal import Decimal

from pricing.model import Price

UNITS_PER_USD = 10**10
_UNITS_PER_TOKEN_PER_USD_PER_MILLION = UNITS_PER_USD // 10**6  # 10^4


@dataclass(frozen=True, slots=True)
class Cost:
    """The cost of one request per billing category, in 10^-10 USD."""

    input: int
    cache_read: int
    cache_write: int
    output: int

    @property
    def total(self) -> int:
        return self.input + self.cache_read + self.cache_write + self.output

    def by_type(self) -> dict[str, int]:
        return {"input": self.input, "cache_read": self.cache_read,
                "cache_write": self.cache_write, "output": self.output}


@functools.lru_cache(maxsize=4096)  # a handful of prices, asked for on every request
def unit_price(per_million: Decimal) -> int:
    """Units per token for a USD-per-million price; exact for ≤ 4 decimal places."""
    units = per_million * _UNITS_PER_TOKEN_PER_USD_PER_MILLION
    if units != units.to_integral_value():
        raise ValueError(f"price {per_million} has more than 4 decimal places")
    return int(units)


Units = tuple[int, int, int, int]  # per token: input, cache_read, cache_write, output


def unit_prices(price: Price) -> Units:
    return (unit_price(price.input), unit_price(price.cache_read), unit_price(price.cache_write),
            unit_price(price.output))


def cost(price: Price, input_tokens: int, cache_read_tokens: int, cache_write_tokens: int,
         output_tokens: int) -> Cost:
    return cost_at(unit_prices(price), input_tokens, cache_read_tokens, cache_write_tokens, output_tokens)


def cost_at(units: Units, input_tokens: int, cache_read_tokens: int, cache_write_tokens: int,
            output_tokens: int) -> Cost:
    """As cost(), with the unit prices already looked up (PriceBook.resolve_units)."""
    if input_tokens < 0 or cache_read_tokens < 0 or cache_write_tokens < 0 or output_tokens < 0:
        raise ValueError(f"token counts cannot be negative: "
                         f"{(input_tokens, cache_read_tokens, cache_write_tokens, output_tokens)}")
    pi, pr, pw, po = units
    return Cost(input_tokens * pi, cache_read_tokens * pr, cache_write_tokens * pw, output_tokens * po)


def usd(units: int) -> Decimal:
    """Exact dollars for a number of units."""
    return Decimal(units).scaleb(-10)


def format_usd(units: int) -> str:
    """Exact dollars in plain notation, no trailing zeros: 2740000000000 -> "274", 2 -> "0.0000000002"."""
    d = usd(units).normalize()
    return format(d, "f")
