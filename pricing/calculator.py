"""Exact cost arithmetic: integers of 10^-10 USD, so sums never drift.

A price has at most 4 decimal places per million tokens, so one token costs
price × 10^4 units exactly, and a cost is tokens × that integer: no rounding anywhere. A
per-call fee is USD per 1,000 calls with at most 4 decimal places, so one call costs
price × 10^7 units exactly.

Bounds, which the ledger's storage is sized for (proxy/ledger/store/rows.py; proved in
tests/pricing/test_bounds.py): a price is at most MAX_PRICE_PER_MILLION, $1,000,000 per
million tokens ($1 a token, 10^10 units; `prices check` refuses more), and a token count at
most MAX_TOKENS, 10^9 per category (proxy/protocol/usage.py refuses more as garbage). A fee is
at most MAX_FEE_PER_1K, $1,000,000 per 1,000 calls ($1,000 a call, 10^13 units), and a record
counts at most MAX_FEE_CALLS = 10^5 calls. One record then costs at most
MAX_COST_UNITS = 5 token categories × 10^9 × 10^10 + 10^5 × 10^13 = 5 × 10^19 + 10^18 units
($5.1 × 10^9): more than a signed 64-bit integer holds, which the ledger allows for. A long-context
band only picks other prices under the same ceiling, and iterations priced apart share the
per-category caps (price_parts), so neither raises the bound.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Context, Decimal, DecimalException, Inexact, InvalidOperation, Overflow
from itertools import pairwise

from pricing.model import BILLING_TYPES, Price

UNITS_PER_USD = 10**10
_UNITS_PER_TOKEN_PER_USD_PER_MILLION = UNITS_PER_USD // 10**6  # 10^4
_UNITS_PER_CALL_PER_USD_PER_1K = UNITS_PER_USD // 10**3  # 10^7
MAX_PRICE_PER_MILLION = Decimal(1_000_000)
MAX_UNIT_PRICE = int(MAX_PRICE_PER_MILLION) * _UNITS_PER_TOKEN_PER_USD_PER_MILLION  # 10^10 units per token
MAX_TOKENS = 10**9
# Per-call fees: a record counts at most this many calls (more is garbage, refused by the usage
# reader), and a provider's own cost figure above MAX_PROVIDER_COST_UNITS ($10^8) is not kept.
MAX_FEE_CALLS = 100_000
MAX_FEE_PER_1K = Decimal(1_000_000)
MAX_FEE_UNIT = int(MAX_FEE_PER_1K) * _UNITS_PER_CALL_PER_USD_PER_1K  # 10^13 units ($1,000) per call
MAX_PROVIDER_COST_UNITS = 10**18
MAX_COST_UNITS = len(BILLING_TYPES) * MAX_TOKENS * MAX_UNIT_PRICE + MAX_FEE_CALLS * MAX_FEE_UNIT
# Wide enough for any price under the ceiling; anything inexact raises here, never rounds.
_EXACT = Context(prec=60, traps=[InvalidOperation, Overflow, Inexact])

# Priced.flags
CACHE_TTL_UNPRICED = "cache_ttl_unpriced"  # 1-hour cache writes, no cache_write_1h price: priced at cache_write
FEE_UNPRICED = "fee_unpriced"  # web search calls, no web_search_per_1k price: fee 0


@dataclass(frozen=True, slots=True)
class Tokens:
    """What one request (or one iteration of it) is billed for: token counts and fee calls."""

    input: int
    cache_read: int
    cache_write: int
    output: int
    cache_write_1h: int = 0
    web_search_calls: int = 0

    @property
    def input_side(self) -> int:
        """Everything the model read: what a long-context band is chosen on."""
        return self.input + self.cache_read + self.cache_write + self.cache_write_1h


@dataclass(frozen=True, slots=True)
class Cost:
    """The cost of one request per billing category and fee, in 10^-10 USD."""

    input: int
    cache_read: int
    cache_write: int
    output: int
    cache_write_1h: int = 0
    web_search: int = 0

    @property
    def total(self) -> int:
        """Tokens and fees: what the record costs."""
        return self.input + self.cache_read + self.cache_write + self.cache_write_1h + self.output + self.web_search

    @property
    def fees(self) -> int:
        return self.web_search

    def by_type(self) -> dict[str, int]:
        """The token categories (BILLING_TYPES), fees left out."""
        return {"input": self.input, "cache_read": self.cache_read, "cache_write": self.cache_write,
                "cache_write_1h": self.cache_write_1h, "output": self.output}

    def by_fee(self) -> dict[str, int]:
        """The fees (FEE_TYPES)."""
        return {"web_search": self.web_search}

    def __add__(self, other: Cost) -> Cost:
        if not isinstance(other, Cost):
            return NotImplemented
        return Cost(self.input + other.input, self.cache_read + other.cache_read,
                    self.cache_write + other.cache_write, self.output + other.output,
                    self.cache_write_1h + other.cache_write_1h, self.web_search + other.web_search)


@dataclass(frozen=True, slots=True)
class Priced:
    """A cost with how it was reached."""

    cost: Cost
    band: int  # above_input_tokens of the band used; 0 = the entry's base prices
    flags: tuple[str, ...] = ()  # CACHE_TTL_UNPRICED, FEE_UNPRICED


@dataclass(frozen=True, slots=True)
class Rates:
    """Units per token at one price level of an entry (its base prices, or one band)."""

    above: int  # the band's above_input_tokens; 0 for the base prices
    input: int
    cache_read: int
    cache_write: int
    cache_write_1h: int  # cache_write's when the level has no 1-hour price (ttl_priced False)
    output: int
    ttl_priced: bool


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
    return _exact_units(per_million, _UNITS_PER_TOKEN_PER_USD_PER_MILLION)


def fee_unit_price(per_1k: Decimal) -> int:
    """Units per call for a USD-per-1,000-calls fee; exact for ≤ 4 decimal places, else ValueError."""
    if not per_1k.is_finite():
        raise ValueError(f"fee {per_1k} per 1,000 calls is not a finite number")
    if not 0 <= per_1k <= MAX_FEE_PER_1K:
        raise ValueError(f"fee {per_1k} per 1,000 calls is outside 0 to {MAX_FEE_PER_1K}")
    return _exact_units(per_1k, _UNITS_PER_CALL_PER_USD_PER_1K)


def _exact_units(price: Decimal, scale: int) -> int:
    if not price:
        return 0  # also 0E+999999: a zero with any exponent
    try:
        units = _EXACT.multiply(price, Decimal(scale))
        whole = units.to_integral_exact(context=_EXACT)
    except DecimalException:
        raise ValueError(f"price {price} has more than the decimal places a whole unit allows") from None
    return int(whole)


# --- Version-1 arithmetic, kept for callers that price an entry's base token prices only. ---

Units = tuple[int, int, int, int]  # per token: input, cache_read, cache_write, output


def unit_prices(price: Price) -> Units:
    """The entry's base unit prices (no band, no 1-hour writes, no fees)."""
    return (unit_price(price.input), unit_price(price.cache_read), unit_price(price.cache_write),
            unit_price(price.output))


def cost(price: Price, input_tokens: int, cache_read_tokens: int, cache_write_tokens: int,
         output_tokens: int) -> Cost:
    """Four counts at the entry's base prices. Version-1 arithmetic: price_tokens() is the
    full one (bands, 1-hour writes, fees); for a version-1 entry both agree."""
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


# --- Version 2: bands, 1-hour cache writes, per-call fees. ---

@dataclass(frozen=True, slots=True)
class _Compiled:
    price: Price  # held so the id() the memo is keyed by cannot be reused while it is there
    levels: tuple[Rates, ...]  # base first, then the bands, ascending
    fee: int | None  # units per web search call; None: no fee price


_compiled: dict[int, _Compiled] = {}


def rates(price: Price) -> tuple[Rates, ...]:
    """The entry's price levels in units per token: its base prices, then each band, ascending."""
    return _compile(price).levels


def rates_for(price: Price, input_side: int) -> Rates:
    """The level a request with this many input-side tokens is priced at (> above applies)."""
    levels = _compile(price).levels
    for level in reversed(levels):
        if input_side > level.above:
            return level
    return levels[0]


def fee_units(price: Price) -> int | None:
    """Units per web search call, None when the entry has no fee price."""
    return _compile(price).fee


def _compile(price: Price) -> _Compiled:
    """Per entry, once: the unit prices of every level (a request only multiplies)."""
    found = _compiled.get(id(price))
    if found is not None and found.price is price:
        return found
    base_1h = price.cache_write_1h
    levels = [_level(0, price.input, price.cache_read, price.cache_write, base_1h, price.output)]
    for band in price.bands:
        levels.append(_level(
            band.above_input_tokens,
            price.input if band.input is None else band.input,
            price.cache_read if band.cache_read is None else band.cache_read,
            price.cache_write if band.cache_write is None else band.cache_write,
            base_1h if band.cache_write_1h is None else band.cache_write_1h,
            price.output if band.output is None else band.output))
    if any(b.above <= a.above for a, b in pairwise(levels)):  # the base is at 0
        raise ValueError(f"{price.model} ({price.tier}): bands must be above 0 and strictly ascending")
    fee = None if price.web_search_per_1k is None else fee_unit_price(price.web_search_per_1k)
    compiled = _Compiled(price, tuple(levels), fee)
    if len(_compiled) >= 4096:  # entries are few; a bound for books built again and again
        _compiled.clear()
    _compiled[id(price)] = compiled
    return compiled


def _level(above: int, inp: Decimal, read: Decimal, write: Decimal, write_1h: Decimal | None,
           out: Decimal) -> Rates:
    w = unit_price(write)
    return Rates(above, unit_price(inp), unit_price(read), w, w if write_1h is None else unit_price(write_1h),
                 unit_price(out), write_1h is not None)


def price_tokens(price: Price, tokens: Tokens) -> Priced:
    """The exact cost of one request at an entry: the band is chosen once on the whole input
    side, and every category is priced at it. ValueError for counts out of range."""
    t = tokens
    if not (0 <= t.input <= MAX_TOKENS and 0 <= t.cache_read <= MAX_TOKENS and 0 <= t.cache_write <= MAX_TOKENS
            and 0 <= t.output <= MAX_TOKENS and 0 <= t.cache_write_1h <= MAX_TOKENS):
        raise ValueError(f"token counts must be 0 to {MAX_TOKENS} (none can be negative): {t}")
    if not 0 <= t.web_search_calls <= MAX_FEE_CALLS:
        raise ValueError(f"web search calls must be 0 to {MAX_FEE_CALLS}: {t.web_search_calls}")
    compiled = _compile(price)
    r = compiled.levels[0]
    if len(compiled.levels) > 1:
        side = t.input + t.cache_read + t.cache_write + t.cache_write_1h
        for level in reversed(compiled.levels):
            if side > level.above:
                r = level
                break
    flags: tuple[str, ...] = ()
    if t.cache_write_1h and not r.ttl_priced:
        flags = (CACHE_TTL_UNPRICED,)
    fee = 0
    if t.web_search_calls:
        if compiled.fee is None:
            flags += (FEE_UNPRICED,)
        else:
            fee = t.web_search_calls * compiled.fee
    return Priced(Cost(t.input * r.input, t.cache_read * r.cache_read, t.cache_write * r.cache_write,
                       t.output * r.output, t.cache_write_1h * r.cache_write_1h, fee), r.above, flags)


def price_parts(price: Price, parts: Iterable[Tokens]) -> Priced:
    """Several parts of one request (Anthropic `usage.iterations`), each at its own band, summed.
    The band reported is the highest any part used. The parts' sums are held to the same caps
    as one request's counts, so the record's cost stays within MAX_COST_UNITS."""
    total: Cost | None = None
    band, flags = 0, []
    sums = [0] * 6
    for part in parts:
        one = price_tokens(price, part)
        total = one.cost if total is None else total + one.cost
        band = max(band, one.band)
        flags += [f for f in one.flags if f not in flags]
        for i, n in enumerate((part.input, part.cache_read, part.cache_write, part.output, part.cache_write_1h,
                               part.web_search_calls)):
            sums[i] += n
    if total is None:
        raise ValueError("no parts to price")
    if max(sums[:5]) > MAX_TOKENS or sums[5] > MAX_FEE_CALLS:
        raise ValueError(f"the parts sum to more than {MAX_TOKENS} tokens in a category or "
                         f"{MAX_FEE_CALLS} calls: {sums}")
    return Priced(total, band, tuple(flags))


def usd(units: int) -> Decimal:
    """Exact dollars for a number of units, however many digits (no context rounding)."""
    sign, digits, _ = Decimal(units).as_tuple()
    return Decimal((sign, digits, -10))


def format_usd(units: int) -> str:
    """Exact dollars in plain notation, no trailing zeros: 2740000000000 -> "274", 2 -> "0.0000000002"."""
    d = usd(units)
    d = d.normalize(Context(prec=max(len(d.as_tuple().digits), 1)))
    return format(d, "f")

