"""What the meter reads of a request body: the whole of an ordinary one, a few fields of a
body that could hold more values than it is safe to build (proxy/protocol/skim.py)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import orjson

from proxy.protocol.skim import WHOLE_VALUES, NotAnObject, SkimError, Wanted, fits_whole, skim

# Every top-level field the relay, the budgets and settle() read (proxy/relay/handler.py,
# proxy/budget/reserve.py, proxy/protocol/usage.py).
_SCALARS = frozenset({"model", "stream", "service_tier", "speed", "user", "max_tokens", "max_completion_tokens",
                      "max_output_tokens", "n_predict", "n", "best_of",
})
# Kept as scalars too, so that the fields read are those orjson gives: a `stream_options: null`
# is there (and so is not spliced in again, proxy/relay/handler.py).
_OBJECTS = frozenset({"metadata", "stream_options", "cache_control"})
# The cache breakpoints settle() looks at for a 1-hour TTL (usage._asks_1h).
TTL_PATHS = (("cache_control", "ttl"), ("system", "item", "cache_control", "ttl"),
             ("tools", "item", "cache_control", "ttl"),
             ("messages", "item", "content", "item", "cache_control", "ttl"),
             ("messages", "item", "content", "item", "content", "item", "cache_control", "ttl"))
REQUEST = Wanted(scalars=_SCALARS | _OBJECTS, objects=_OBJECTS, marks=dict.fromkeys(TTL_PATHS, "1h"))


def read_request(body: bytes, whole_values: int = WHOLE_VALUES) -> Generator[None, None, tuple[dict[str, Any], bool]]:
    """(the request, skimmed): the parsed body, or when it could hold too many values to build
    (skimmed True) only the fields the meter reads. Pauses between slices of a large body;
    raises ValueError with the reason a body is refused."""
    if (yield from fits_whole(body, whole_values)):
        try:
            req = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise ValueError(f"request body is not valid JSON: {e}") from None
        if not isinstance(req, dict):
            raise ValueError("request body must be a JSON object")
        return req, False
    try:
        got = yield from skim(body, REQUEST)
    except NotAnObject:
        raise ValueError("request body must be a JSON object") from None
    except SkimError as e:
        raise ValueError(f"request body is not valid JSON: {e}") from None
    fields = got.top
    if got.marks:
        # All settle() asks is whether some breakpoint has a 1-hour TTL: one at the top says so.
        fields["cache_control"] = {"ttl": "1h"}
    return fields, True
