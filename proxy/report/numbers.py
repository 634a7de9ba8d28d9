"""Numbers as people read them: money, token counts, shares. The one place every format takes them from.

SPEC: money shown to people keeps enough digits that a non-zero amount never reads as
`$0.00`. Nothing here writes scientific notation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Context, Decimal, localcontext
from itertools import pairwise

from pricing import usd

_CENT = Decimal("0.01")
_SUFFIXES = ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "k"))


def money(units: int) -> str:
    """10^-10 USD units as dollars and cents, e.g. `$1,234.57`; below a cent, two significant digits (`$0.0008`)."""
    return money_decimal(usd(units))


def money_decimal(d: Decimal) -> str:
    sign, d = ("-" if d < 0 else ""), abs(d)
    with localcontext(Context(prec=80)):  # a ledger's sums can pass the default 28 digits
        cents = d.quantize(_CENT)
        if cents or not d:
            return f"{sign}${cents:,}"
        two_digits = d.quantize(Decimal(1).scaleb(d.adjusted() - 1))  # 0.000812 -> 0.00081
    return f"{sign}${format(two_digits.normalize(), 'f')}"


def count(n: int) -> str:
    """An exact count with thousands separators: 1,355,002,117."""
    return f"{n:,}"


def counted(n: int, noun: str, plural: str = "") -> str:
    """A count and its noun in agreement: `1 request`, `2 requests`, `1,000 records`."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


UNPRICED = "unpriced"  # a cost with no price behind it: unknown, never $0.00


def cost(units: int, unpriced: int) -> str:
    """A cost that may leave requests out: `$1.20`; `unpriced` when no request of it had a price
    and nothing priced adds up; `≥ $1.20, 3 unpriced` when a priced part is a lower bound."""
    if not unpriced:
        return money(units)
    if not units:
        return UNPRICED
    return f"≥ {money(units)}, {count(unpriced)} {UNPRICED}"


def compact(v: float, digits: int = 3) -> str:
    """A large number in a few digits with a word-like suffix: 1.36 B, 52.3 M, 12.5 k, 950."""
    a = abs(v)
    for size, suffix in _SUFFIXES:
        if a >= size * 0.9995:  # 999,600 reads "1 M", not "1000 k"
            return f"{_significant(v / size, digits)} {suffix}"
    return _significant(v, digits)


def tokens(n: float) -> str:
    return f"{compact(n)} tokens"


def money_compact(d: float) -> str:
    """Dollars for an axis or a label: $86.78, $0.0008, $55,961, $1.2 M."""
    a = abs(d)
    sign = "-" if d < 0 else ""
    if a >= 10**6:
        return f"{sign}${compact(a)}"
    if a >= 1000:
        return f"{sign}${a:,.0f}"
    return money_decimal(Decimal(repr(d)))


def money_ticks(values: Sequence[float]) -> list[str]:
    """Axis labels in one style: whole dollars, cents, or the decimals a small step needs
    ($0, $20,000; $0.00, $0.50; $0.0000, $0.0002)."""
    if any(abs(v) >= 10**6 for v in values):
        return [f"{'-' if v < 0 else ''}${compact(abs(v))}" for v in values]
    decimals = _tick_decimals(values)
    return [f"{'-' if v < 0 else ''}${abs(v):,.{decimals}f}" for v in values]


def _tick_decimals(values: Sequence[float]) -> int:
    """Whole dollars, cents, or as many decimals as the step needs: a $0.0002 step written to
    the cent would read "$0.00" on every tick."""
    if all(v == int(v) for v in values):
        return 0
    gaps = [abs(b - a) for a, b in pairwise(values) if b != a]
    step = min(gaps, default=max((abs(v) for v in values), default=1.0)) or 1.0
    # Float ticks carry noise (3 × 0.0002 = 0.0006000000000000001): exact to a thousandth of the step is exact.
    return next((d for d in range(2, 16) if all(abs(v - round(v, d)) <= step / 1000 for v in values)), 15)


def percent(share: float, digits: int = 1) -> str:
    """A share as a percentage; a non-zero share too small to show reads `<0.1%`, never `0.0%`."""
    smallest = 10.0 ** -digits
    if 0 < abs(share) * 100 < smallest / 2:
        return f"<{smallest:.{digits}f}%"
    return f"{share * 100:.{digits}f}%"


def _significant(v: float, digits: int) -> str:
    if v == 0 or not math.isfinite(v):
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(v))))
    text = f"{v:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text
