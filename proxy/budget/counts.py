"""How many answers and output tokens a request asks for, read as the upstreams read them.

A reservation (proxy/budget/reserve.py) multiplies the largest output limit a request gives by
its `n` or `best_of`. Upstreams do not all insist on JSON integers: pydantic-typed servers
(vLLM, LiteLLM, most OpenAI-compatible Python servers) coerce `"200"`, `200.0` and `true` to
integers in their default lax mode, and C++ servers read a float by truncating it. So a value
counts here if any of them could read it as a number: a JSON integer, a boolean (1 or 0), a
finite float or a numeric string, rounded up (never below what an upstream reads). Anything
else cannot be bounded, and a budget refuses the request with 400 (`unreadable_count`) rather
than guess: an upstream would refuse it too, or read it some way no bound here foresees.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation

MAX_KEYS = ("max_tokens", "max_completion_tokens", "max_output_tokens", "n_predict")
CHOICE_KEYS = ("n", "best_of")
COUNT_KEYS = (*MAX_KEYS, *CHOICE_KEYS)
CAP = 10**9  # beyond any model's output or answers: a larger count is read as this
_LONGEST = 64  # characters of a numeric string: longer is no count any upstream reads


class Unreadable(ValueError):
    """A count no bound can be read from."""


def count(value: object) -> int | None:
    """The integer `value` is read as, rounded up and capped at CAP; None when it is absent (null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return min(value, CAP)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Unreadable(value)
        return min(math.ceil(value), CAP) if value < CAP else CAP
    if isinstance(value, str):
        if len(value) > _LONGEST:
            raise Unreadable(value)
        try:
            value = Decimal(value.strip())
        except InvalidOperation:
            raise Unreadable(value) from None
    if isinstance(value, Decimal):  # a skimmed body's non-integer numbers, and numeric strings
        if not value.is_finite():
            raise Unreadable(value)
        return CAP if value >= CAP else int(value.to_integral_value(rounding="ROUND_CEILING"))
    raise Unreadable(value)


def unreadable(request: object) -> str | None:
    """The first count field of the request no bound can be read from, or None."""
    if not isinstance(request, Mapping):
        return None
    for key in COUNT_KEYS:
        try:
            count(request.get(key))
        except Unreadable:
            return key
    return None


def most_output(request: Mapping[str, object]) -> int | None:
    """The largest positive output limit of every spelling (servers differ in which they honour)."""
    given = [c for c in (count(request.get(k)) for k in MAX_KEYS) if c is not None and c > 0]
    return max(given) if given else None


def choices(request: Mapping[str, object]) -> int:
    """Answers generated: the larger of `n` and `best_of` (legacy completions generate best_of and
    return n), at least 1."""
    return max(max(count(request.get(k)) or 1, 1) for k in CHOICE_KEYS)
