"""Exact cost arithmetic: a record's cost is an integer of 10^-10 USD ("units"), so sums never drift.

A price has at most MAX_DECIMALS = 10 decimal places in USD per million tokens, so one token
costs price × 10^10 micro-units exactly (a micro-unit is 10^-6 units, 10^-16 USD): an integer
rate. A per-call fee is USD per 1,000 calls with at most 10 decimal places, so one call costs
price × 10^13 micro-units exactly. A record's cost is computed exactly in micro-units (counts ×
rates, every category and every part summed) and rounded half-even to whole units once. The
categories of a Cost are that one rounding split up: each is the rounded running sum up to it
minus the rounded running sum before it (in the order input, cache_read, cache_write,
cache_write_1h, output, web_search), so they add up to the record's total exactly and each is
within one unit of its own exact value. A price with at most 4 decimal places costs whole units
per token (and a fee with at most 7, whole units per call): no rounding happens at all, and
such entries price exactly as version 1 did.

Bounds, which the ledger's storage is sized for (proxy/ledger/store/rows.py; proved in
tests/pricing/test_bounds.py): a price is at most MAX_PRICE_PER_MILLION, $1,000,000 per
million tokens ($1 a token, 10^10 units; `prices check` refuses more), and a token count at
most MAX_TOKENS, 10^9 per category (proxy/protocol/usage.py refuses more as garbage). A fee is
at most MAX_FEE_PER_1K, $1,000,000 per 1,000 calls ($1,000 a call, 10^13 units), and a record
counts at most MAX_FEE_CALLS = 10^5 calls. The exact cost of one record is then at most
5 token categories × 10^9 × 10^10 + 10^5 × 10^13 = 5 × 10^19 + 10^18 units, an integer, and
rounding half-even is monotone, so the rounded cost is at most MAX_COST_UNITS = 5 × 10^19 + 10^18
units ($5.1 × 10^9): more than a signed 64-bit integer holds, which the ledger allows for. A
long-context band only picks other prices under the same ceiling, and iterations priced apart
share the per-category caps (price_parts), so neither raises the bound.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Context, Decimal, DecimalException, Inexact, InvalidOperation, Overflow
from itertools import pairwise

from pricing.model import BILLING_TYPES, Price

UNITS_PER_USD = 10**10
MICROS_PER_UNIT = 10**6  # costs are computed exactly in micro-units (10^-16 USD), then rounded to units
_HALF = MICROS_PER_UNIT // 2
MAX_DECIMALS = 10  # of a price in USD per million tokens, or of a fee in USD per 1,000 calls
_MICROS_PER_TOKEN_PER_USD_PER_MILLION = UNITS_PER_USD * MICROS_PER_UNIT // 10**6  # 10^10
_MICROS_PER_CALL_PER_USD_PER_1K = UNITS_PER_USD * MICROS_PER_UNIT // 10**3  # 10^13
MAX_PRICE_PER_MILLION = Decimal(1_000_000)
MAX_UNIT_PRICE = int(MAX_PRICE_PER_MILLION) * UNITS_PER_USD // 10**6  # 10^10 units ($1) per token
MAX_RATE = MAX_UNIT_PRICE * MICROS_PER_UNIT  # 10^16 micro-units per token
MAX_TOKENS = 10**9
# Per-call fees: a record counts at most this many calls (more is garbage, refused by the usage
# reader), and a provider's own cost figure above MAX_PROVIDER_COST_UNITS ($10^8) is not kept.
MAX_FEE_CALLS = 100_000
MAX_FEE_PER_1K = Decimal(1_000_000)
MAX_FEE_UNIT = int(MAX_FEE_PER_1K) * UNITS_PER_USD // 10**3  # 10^13 units ($1,000) per call
MAX_FEE_RATE = MAX_FEE_UNIT * MICROS_PER_UNIT  # 10^19 micro-units per call
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


def round_micros(micros: int) -> int:
    """Micro-units to whole units, half to even (the one rounding a record's cost gets)."""
    q, r = divmod(micros, MICROS_PER_UNIT)
    if r > _HALF or (r == _HALF and q & 1):
        q += 1
    return q


def split(inp: int, read: int, write: int, out: int, write_1h: int = 0, fee: int = 0) -> Cost:
    """Exact micro-unit amounts per category, rounded once: the total is round(sum), and each
    category the rounded running sum up to it minus the one before it (BILLING_TYPES order,
    then the fee), so the categories add up to the rounded total."""
    a = round_micros(inp)
    s = inp + read
    b = round_micros(s)
    s += write
    c = round_micros(s)
    s += write_1h
    d = round_micros(s)
    s += out
    e = round_micros(s)
    f = round_micros(s + fee) if fee else e
    return Cost(a, b - a, c - b, e - d, d - c, f - e)


@dataclass(frozen=True, slots=True)
class Rates:
    """One price level of an entry (its base prices, or one band) in micro-units (10^-16 USD)
    per token, and the entry's fee in micro-units per web search call (fees are never banded)."""

    above: int  # the band's above_input_tokens; 0 for the base prices
    input: int
    cache_read: int
    cache_write: int
    cache_write_1h: int  # cache_write's when the level has no 1-hour price (ttl_priced False)
    output: int
    ttl_priced: bool
    fee: int | None = None  # None: the entry has no web search price (calls cost 0)

    def units(self, input: int = 0, cache_read: int = 0, cache_write: int = 0,
              cache_write_1h: int = 0, output: int = 0, web_search_calls: int = 0) -> int:
        """These counts at this level, exact, rounded half-even to units once (for sums of
        records, e.g. a report's what-ifs over hourly rows, as for one record)."""
        return round_micros(input * self.input + cache_read * self.cache_read + cache_write * self.cache_write
                            + cache_write_1h * self.cache_write_1h + output * self.output
                            + web_search_calls * (self.fee or 0))


def token_rate(per_million: Decimal) -> int:
    """Micro-units per token for a USD-per-million price; exact for ≤ 10 decimal places,
    ValueError for anything else (never a decimal signal: this runs while a response is relayed)."""
    if not per_million.is_finite():
        raise ValueError(f"price {per_million} per million tokens is not a finite number")
    if not 0 <= per_million <= MAX_PRICE_PER_MILLION:
        raise ValueError(f"price {per_million} per million tokens is outside 0 to {MAX_PRICE_PER_MILLION}")
    return _exact(per_million, _MICROS_PER_TOKEN_PER_USD_PER_MILLION)


def fee_rate(per_1k: Decimal) -> int:
    """Micro-units per call for a USD-per-1,000-calls fee; exact for ≤ 10 decimal places, else ValueError."""
    if not per_1k.is_finite():
        raise ValueError(f"fee {per_1k} per 1,000 calls is not a finite number")
    if not 0 <= per_1k <= MAX_FEE_PER_1K:
        raise ValueError(f"fee {per_1k} per 1,000 calls is outside 0 to {MAX_FEE_PER_1K}")
    return _exact(per_1k, _MICROS_PER_CALL_PER_USD_PER_1K)


def _exact(price: Decimal, scale: int) -> int:
    if not price:
        return 0  # also 0E+999999: a zero with any exponent
    try:
        micros = _EXACT.multiply(price, Decimal(scale))
        whole = micros.to_integral_exact(context=_EXACT)
    except DecimalException:
        raise ValueError(f"price {price} has more than {MAX_DECIMALS} decimal places") from None
    return int(whole)


# --- Version-1 arithmetic, kept for callers that price an entry's base token prices only. ---

Units = tuple[int, int, int, int]  # micro-units per token: input, cache_read, cache_write, output


def unit_prices(price: Price) -> Units:
    """The entry's base rates in micro-units per token (no band, no 1-hour writes, no fees)."""
    r = _compile(price).levels[0].rates
    return (r.input, r.cache_read, r.cache_write, r.output)


def cost(price: Price, input_tokens: int, cache_read_tokens: int, cache_write_tokens: int,
         output_tokens: int) -> Cost:
    """Four counts at the entry's base prices. Version-1 arithmetic: price_tokens() is the
    full one (bands, 1-hour writes, fees); for a version-1 entry both agree."""
    return cost_at(unit_prices(price), input_tokens, cache_read_tokens, cache_write_tokens, output_tokens)


def cost_at(units: Units, input_tokens: int, cache_read_tokens: int, cache_write_tokens: int,
            output_tokens: int) -> Cost:
    """As cost(), with the rates already looked up (unit_prices): exact, rounded once."""
    if not (0 <= input_tokens <= MAX_TOKENS and 0 <= cache_read_tokens <= MAX_TOKENS
            and 0 <= cache_write_tokens <= MAX_TOKENS and 0 <= output_tokens <= MAX_TOKENS):
        raise ValueError(f"token counts must be 0 to {MAX_TOKENS} (none can be negative): "
                         f"{(input_tokens, cache_read_tokens, cache_write_tokens, output_tokens)}")
    pi, pr, pw, po = units
    return split(input_tokens * pi, cache_read_tokens * pr, cache_write_tokens * pw, output_tokens * po)


# --- Version 2: bands, 1-hour cache writes, per-call fees. ---

@dataclass(frozen=True, slots=True)
class _Level:
    rates: Rates
    # Whole units per token (input, cache_read, cache_write, cache_write_1h, output, fee per call)
    # when every rate is a whole number of units: then nothing needs rounding. None otherwise.
    whole: tuple[int, int, int, int, int, int] | None


@dataclass(frozen=True, slots=True)
class _Compiled:
    price: Price  # held so the id() the memo is keyed by cannot be reused while it is there
    levels: tuple[_Level, ...]  # base first, then the bands, ascending
    fee: int | None  # micro-units per web search call; None: no fee price


_compiled: dict[int, _Compiled] = {}


def rates(price: Price) -> tuple[Rates, ...]:
    """The entry's price levels in micro-units per token: its base prices, then each band, ascending."""
    return tuple(level.rates for level in _compile(price).levels)


def rates_for(price: Price, input_side: int) -> Rates:
    """The level a request with this many input-side tokens is priced at (> above applies)."""
    return _pick(_compile(price).levels, input_side).rates


def _pick(levels: tuple[_Level, ...], input_side: int) -> _Level:
    if len(levels) > 1:
        for level in reversed(levels):
            if input_side > level.rates.above:
                return level
    return levels[0]


def _compile(price: Price) -> _Compiled:
    """Per entry, once: the rates of every level (a request only multiplies)."""
    found = _compiled.get(id(price))
    if found is not None and found.price is price:
        return found
    fee = None if price.web_search_per_1k is None else fee_rate(price.web_search_per_1k)
    base_1h = price.cache_write_1h
    levels = [_level(0, price.input, price.cache_read, price.cache_write, base_1h, price.output, fee)]
    for band in price.bands:
        levels.append(_level(
            band.above_input_tokens,
            price.input if band.input is None else band.input,
            price.cache_read if band.cache_read is None else band.cache_read,
            price.cache_write if band.cache_write is None else band.cache_write,
            base_1h if band.cache_write_1h is None else band.cache_write_1h,
            price.output if band.output is None else band.output, fee))
    if any(b.rates.above <= a.rates.above for a, b in pairwise(levels)):  # the base is at 0
        raise ValueError(f"{price.model} ({price.tier}): bands must be above 0 and strictly ascending")
    compiled = _Compiled(price, tuple(levels), fee)
    if len(_compiled) >= 4096:  # entries are few; a bound for books built again and again
        _compiled.clear()
    _compiled[id(price)] = compiled
    return compiled


def _level(above: int, inp: Decimal, read: Decimal, write: Decimal, write_1h: Decimal | None,
           out: Decimal, fee: int | None) -> _Level:
    w = token_rate(write)
    r = Rates(above, token_rate(inp), token_rate(read), w, w if write_1h is None else token_rate(write_1h),
              token_rate(out), write_1h is not None, fee)
    every = (r.input, r.cache_read, r.cache_write, r.cache_write_1h, r.output, fee or 0)
    whole = None
    if not any(x % MICROS_PER_UNIT for x in every):
        i, cr, cw, c1, o, f = (x // MICROS_PER_UNIT for x in every)
        whole = (i, cr, cw, c1, o, f)
    return _Level(r, whole)


def _check(t: Tokens) -> None:
    if not (0 <= t.input <= MAX_TOKENS and 0 <= t.cache_read <= MAX_TOKENS and 0 <= t.cache_write <= MAX_TOKENS
            and 0 <= t.output <= MAX_TOKENS and 0 <= t.cache_write_1h <= MAX_TOKENS):
        raise ValueError(f"token counts must be 0 to {MAX_TOKENS} (none can be negative): {t}")
    if not 0 <= t.web_search_calls <= MAX_FEE_CALLS:
        raise ValueError(f"web search calls must be 0 to {MAX_FEE_CALLS}: {t.web_search_calls}")


def _flags(t: Tokens, r: Rates) -> tuple[str, ...]:
    flags: tuple[str, ...] = ()
    if t.cache_write_1h and not r.ttl_priced:
        flags = (CACHE_TTL_UNPRICED,)
    if t.web_search_calls and r.fee is None:
        flags += (FEE_UNPRICED,)
    return flags


def price_tokens(price: Price, tokens: Tokens) -> Priced:
    """The exact cost of one request at an entry: the band is chosen once on the whole input
    side, every category is priced at it, and the sum is rounded half-even to units once.
    ValueError for counts out of range."""
    t = tokens
    _check(t)
    levels = _compile(price).levels
    level = _pick(levels, t.input + t.cache_read + t.cache_write + t.cache_write_1h) if len(levels) > 1 \
        else levels[0]
    r = level.rates
    flags = _flags(t, r) if t.cache_write_1h or t.web_search_calls else ()
    u = level.whole
    if u is not None:  # whole units per token: exact without rounding
        return Priced(Cost(t.input * u[0], t.cache_read * u[1], t.cache_write * u[2], t.output * u[4],
                           t.cache_write_1h * u[3], t.web_search_calls * u[5]), r.above, flags)
    return Priced(split(t.input * r.input, t.cache_read * r.cache_read, t.cache_write * r.cache_write,
                        t.output * r.output, t.cache_write_1h * r.cache_write_1h,
                        t.web_search_calls * (r.fee or 0)), r.above, flags)


def price_parts(price: Price, parts: Iterable[Tokens]) -> Priced:
    """Several parts of one request (Anthropic `usage.iterations`), each at its own band, summed
    exactly and rounded once. The band reported is the highest any part used. The parts' sums are
    held to the same caps as one request's counts, so the record's cost stays within MAX_COST_UNITS."""
    levels = _compile(price).levels
    band, flags = 0, []
    counts = [0] * 6
    micros = [0] * 6
    n = 0
    for t in parts:
        _check(t)
        r = _pick(levels, t.input_side).rates
        band = max(band, r.above)
        flags += [f for f in _flags(t, r) if f not in flags]
        for i, (c, rate) in enumerate(((t.input, r.input), (t.cache_read, r.cache_read),
                                       (t.cache_write, r.cache_write), (t.output, r.output),
                                       (t.cache_write_1h, r.cache_write_1h), (t.web_search_calls, r.fee or 0))):
            counts[i] += c
            micros[i] += c * rate
        n += 1
    if not n:
        raise ValueError("no parts to price")
    if max(counts[:5]) > MAX_TOKENS or counts[5] > MAX_FEE_CALLS:
        raise ValueError(f"the parts sum to more than {MAX_TOKENS} tokens in a category or "
                         f"{MAX_FEE_CALLS} calls: {counts}")
    return Priced(split(*micros), band, tuple(flags))


def usd(units: int) -> Decimal:
    """Exact dollars for a number of units, however many digits (no context rounding)."""
    sign, digits, _ = Decimal(units).as_tuple()
    return Decimal((sign, digits, -10))


def format_usd(units: int) -> str:
    """Exact dollars in plain notation, no trailing zeros: 2740000000000 -> "274", 2 -> "0.0000000002"."""
    d = usd(units)
    d = d.normalize(Context(prec=max(len(d.as_tuple().digits), 1)))
    return format(d, "f")

