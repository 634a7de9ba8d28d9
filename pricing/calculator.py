"""Exact cost arithmetic: integers of 10^-10 USD, so sums never drift.

A price has at most 4 decimal places per million tokens, so one token costs
price × 10^4 units exactly, and a cost is tokens × that integer: no rounding anywhere.

Bounds, which the ledger's storage is sized for (proxy/ledger/store/rows.py; proved in
tests/pricing/test_bounds.py): a price is at most MAX_PRICE_PER_MILLION, $1,000,000 per
million tokens ($1 a token, 10^10 units; `prices check` refuses more), and a token count at
most MAX_TOKENS, 10^9 per category (proxy/protocol/usage.py refuses more as garbage). One record
then costs at most MAX_COST_UNITS = 4 categories × 10^9 × 10^10 = 4 × 10^19 units
($4 × 10^9): more than a signed 64-bit integer holds, which the ledger allows for.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from decimal import Context, Decimal, DecimalException, Inexact, InvalidOperation, Overflow

from pricing.model import TOKEN_TYPES, Price

UNITS_PER_USD = 10**10
_UNITS_PER_TOKEN_PER_USD_PER_MILLION = UNITS_PER_USD // 10**6  # 10^4
MAX_PRICE_PER_MILLION = Decimal(1_000_000)
MAX_UNIT_PRICE = int(MAX_PRICE_PER_MILLION) * _UNITS_PER_TOKEN_PER_USD_PER_MILLION  # 10^10 units per token
MAX_TOKENS = 10**9
MAX_COST_UNITS = len(TOKEN_TYPES) * MAX_TOKENS * MAX_UNIT_PRICE
# Per-call fees: a record counts at most this many calls (more is garbage, refused by the usage
# reader), and a provider's own cost figure above MAX_PROVIDER_COST_UNITS ($10^8) is not kept.
MAX_FEE_CALLS = 100_000
MAX_PROVIDER_COST_UNITS = 10**18
# Wide enough for any price under the ceiling; anything inexact raises here, never rounds.
_EXACT = Context(prec=60, traps=[InvalidOperation, Overflow, Inexact])


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


def unit_price(per_million: Decimal) -> int:
    """Units per token for a USD-per-million price; exact for ≤ 4 decimal places, ValueError
    for anything else (never a decimal signal: this runs while a response is relayed)."""
    if not per_million.is_finite():  # before the cache: a signalling NaN cannot even be hashed
        raise ValueError(f"price {per_million} per million tokens is not a finite number")
    return _unit_price(per_million)


@functools.lru_cache(maxsize=4096)  # a handful of prices, asked for on every request
def _unit_price(per_million: Decimal) -> int:
    if not 0 <= per_million <= MAX_PRICE_PER_MILLION:
        raise ValueError(f"price {per_million} per million tokens is outside 0 to {MAX_PRICE_PER_MILLION}")
    if not per_million:
        return 0  # also 0E+999999: a zero with any exponent
    try:
        units = _EXACT.multiply(per_million, Decimal(_UNITS_PER_TOKEN_PER_USD_PER_MILLION))
        whole = units.to_integral_exact(context=_EXACT)
    except DecimalException:
        raise ValueError(f"price {per_million} has more than 4 decimal places") from None
    return int(whole)


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
    if not (0 <= input_tokens <= MAX_TOKENS and 0 <= cache_read_tokens <= MAX_TOKENS
            and 0 <= cache_write_tokens <= MAX_TOKENS and 0 <= output_tokens <= MAX_TOKENS):
        raise ValueError(f"token counts must be 0 to {MAX_TOKENS} (none can be negative): "
                         f"{(input_tokens, cache_read_tokens, cache_write_tokens, output_tokens)}")
    pi, pr, pw, po = units
    return Cost(input_tokens * pi, cache_read_tokens * pr, cache_write_tokens * pw, output_tokens * po)


def usd(units: int) -> Decimal:
    """Exact dollars for a number of units, however many digits (no context rounding)."""
    sign, digits, _ = Decimal(units).as_tuple()
    return Decimal((sign, digits, -10))


def format_usd(units: int) -> str:
    """Exact dollars in plain notation, no trailing zeros: 2740000000000 -> "274", 2 -> "0.0000000002"."""
    d = usd(units)
    d = d.normalize(Context(prec=max(len(d.as_tuple().digits), 1)))
    return format(d, "f")
