"""What the provider says a request cost, kept exactly (SPEC "Usage extraction": provider cost).

OpenRouter reports `usage.cost` in USD (plus `cost_details.upstream_inference_cost` when the
customer's own provider key paid, `is_byok`); xAI reports `usage.cost_in_usd_ticks`, already
in 10^-10 USD. orjson reads a JSON number with a fraction as a binary float, and any
integer beyond 64 bits too, so the usage object is read again from its own text with
exact decimals: money never passes through a float. The amount is stored like every
amount, as an integer of 10^-10 USD ("units"), rounded half-even once.
"""

from __future__ import annotations

import json
import re
from decimal import (
    MAX_EMAX,
    MIN_EMIN,
    ROUND_HALF_EVEN,
    Context,
    Decimal,
    DecimalException,
    Inexact,
    InvalidOperation,
    Overflow,
)
from typing import Any

from pricing.calculator import MAX_PROVIDER_COST_UNITS, UNITS_PER_USD

PROVIDER_COST_ROUNDED = "provider_cost_rounded"  # the amount had digits below 10^-10 USD

# Wide enough for any sane amount; an amount with more significant digits than this is garbage.
_EXACT = Context(prec=100, rounding=ROUND_HALF_EVEN, Emax=MAX_EMAX, Emin=MIN_EMIN,
                 traps=[InvalidOperation, Overflow, Inexact])
_DECODER = json.JSONDecoder(parse_float=Decimal)
_USAGE_KEY = re.compile(r'"usage"\s*:\s*')
_MAX_USD = Decimal(MAX_PROVIDER_COST_UNITS) / UNITS_PER_USD
_COST_KEYS = ("cost", "cost_in_usd_ticks")
_COST_KEY_SET = frozenset(_COST_KEYS)
_INT64 = (-(2**63), 2**64 - 1)  # orjson's integers; beyond, it reads a float


class ProviderCost:
    """The provider's figure in units (None: none reported or not kept) and what happened reading it."""

    __slots__ = ("flags", "invalid", "units")

    def __init__(self) -> None:
        self.units: int | None = None
        self.invalid = False  # a figure was there but is not an amount we keep
        self.flags: list[str] = []


def reports_cost(usage: object) -> bool:
    """Cheap test on the parsed usage: only then is its text read again."""
    if not isinstance(usage, dict) or _COST_KEY_SET.isdisjoint(usage):  # most reports: no cost field at all
        return False
    return any(usage.get(k) is not None for k in _COST_KEYS)


def provider_cost(usage: dict[str, Any], raw: str | bytes) -> ProviderCost:
    """The provider's cost of the request whose parsed `usage` object was read from `raw`."""
    out = ProviderCost()
    exact = _exact_usage(raw, usage)
    if exact is None:  # its text could not be found again: an amount read through a float is not kept
        out.invalid = True
        return out
    ticks = exact.get("cost_in_usd_ticks")
    if ticks is not None:
        _keep(out, _units(ticks, 0))
        return out
    cost = exact.get("cost")
    if cost is None:
        return out
    if exact.get("is_byok") is True:
        details = exact.get("cost_details")
        upstream = details.get("upstream_inference_cost") if isinstance(details, dict) else None
        if upstream is None:
            out.flags.append("partial_usage")  # only OpenRouter's own fee is known
        elif not _amount(cost) or not _amount(upstream):
            out.invalid = True
            return out
        else:
            try:
                cost = _EXACT.add(Decimal(cost), Decimal(upstream))
            except DecimalException:
                out.invalid = True
                return out
    _keep(out, _units(cost, 10))
    return out


def _keep(out: ProviderCost, got: tuple[int, bool] | None) -> None:
    if got is None:
        out.invalid = True
        return
    out.units, rounded = got
    if rounded:
        out.flags.append(PROVIDER_COST_ROUNDED)


def _amount(v: object) -> bool:
    """An int or a finite decimal: a bool, a float (NaN), a string or an object is not an amount."""
    return type(v) is int or (isinstance(v, Decimal) and v.is_finite())


def _units(v: object, scale: int) -> tuple[int, bool] | None:
    """v × 10^scale as whole units, rounded half-even, and whether rounding changed it;
    None for anything that is not an amount from 0 to MAX_PROVIDER_COST_UNITS."""
    if not _amount(v):
        return None
    d = Decimal(v)  # type: ignore[arg-type]  # an int or a Decimal: _amount said so
    if d.is_signed() and d != 0:
        return None
    if d == 0:
        return 0, False
    try:
        scaled = d.scaleb(scale, _EXACT)
        whole = scaled.to_integral_value(ROUND_HALF_EVEN, _EXACT)
    except DecimalException:  # more significant digits than any amount has
        return None
    if scaled > MAX_PROVIDER_COST_UNITS:  # above it, even by less than a unit: not an amount kept
        return None
    return int(whole), whole != scaled


def _exact_usage(raw: str | bytes, parsed: dict[str, Any]) -> dict[str, Any] | None:
    """The `usage` object in `raw` that `parsed` was read from, decoded again with exact decimals.

    Outside a JSON string a quote is never escaped, so `"usage":` is a key; of the objects under
    such keys, the one that reads as `parsed` when its numbers are made floats is the one."""
    try:
        text = raw.decode() if isinstance(raw, bytes) else raw
    except UnicodeDecodeError:
        return None
    for m in _USAGE_KEY.finditer(text):
        try:
            obj, _ = _DECODER.raw_decode(text, m.end())
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict) and _as_orjson(obj) == parsed:
            return obj
    return None


def _as_orjson(v: Any) -> Any:
    """A value decoded with exact decimals, as orjson would have read it."""
    if isinstance(v, dict):
        return {k: _as_orjson(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_as_orjson(x) for x in v]
    if isinstance(v, Decimal):
        return float(v)
    if type(v) is int and not _INT64[0] <= v <= _INT64[1]:
        return float(v)
    return v
