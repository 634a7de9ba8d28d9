"""What the meter reads of a whole (non-streamed) answer: usage and metadata, and its text for
estimating. An ordinary answer is parsed whole (usage.read_body); one that could hold more
values than it is safe to build, such as a large batch of embeddings, is skimmed for the same
fields (proxy/protocol/skim.py), and its readers see an object with only those."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from proxy.protocol.body_text import responses_body_text
from proxy.protocol.skim import WHOLE_VALUES, SkimError, Skimmed, Wanted, fits_whole, skim
from proxy.protocol.usage import READER_ERROR, Observed, observe, read_body

_META = frozenset({"model", "id", "service_tier"})
_CHOICE_USAGE = ("choices", "item", "usage")
_OUTPUT_ITEM = ("output", "item")


def _paths(*paths: tuple[str, ...]) -> frozenset[tuple[str, ...]]:
    return frozenset(paths)


# The fields the readers in usage.py use, and the text body_text.py reads, per dialect.
_MESSAGE = ("choices", "item", "message")
_CHAT = Wanted(
    scalars=_META, objects=frozenset({"usage", "x_groq"}), nested=_paths(_CHOICE_USAGE),
    texts=_paths(*((*_MESSAGE, k) for k in ("content", "reasoning_content", "reasoning", "refusal")),
                 (*_MESSAGE, "content", "item", "text"),
                 (*_MESSAGE, "tool_calls", "item", "function", "name"),
                 (*_MESSAGE, "tool_calls", "item", "function", "arguments"),
                 (*_MESSAGE, "function_call", "name"), (*_MESSAGE, "function_call", "arguments"),
                 ("choices", "item", "text")))
# Its output items are kept whole (each is small, bar its text): the text is read from them.
_RESPONSES = Wanted(scalars=_META, objects=frozenset({"usage"}), nested=_paths(_OUTPUT_ITEM))
_MESSAGES = Wanted(
    scalars=_META, objects=frozenset({"usage"}),
    # A tool_use block's input is not counted here (usage.read_body renders it as JSON).
    texts=_paths(("content", "item", "text"), ("content", "item", "thinking"), ("content", "item", "name")))
WANTED = {"chat": _CHAT, "completions": _CHAT, "embeddings": Wanted(scalars=_META, objects=frozenset({"usage"})),
          "responses": _RESPONSES, "messages": _MESSAGES}


def read_answer(endpoint: str, body: bytes, whole_values: int = WHOLE_VALUES,
                ) -> Generator[None, None, tuple[Observed, Callable[[], str]]]:
    """usage.read_body's answer, pausing between slices of a large body (one that could hold
    more than `whole_values` values is skimmed)."""
    if (yield from fits_whole(body, whole_values)):
        return read_body(endpoint, body)
    wanted = WANTED.get(endpoint)
    if wanted is None:
        return Observed(), str
    try:
        got = yield from skim(body, wanted)
    except SkimError:  # as read_body: a body that does not parse is simply not a report
        return Observed(), str
    skeleton = _skeleton(got)
    observed = observe(endpoint, skeleton, body) or Observed()
    if READER_ERROR in observed.faults:
        return observed, str
    try:
        text = responses_body_text(skeleton) if endpoint == "responses" else "\n".join(got.texts)
    except Exception:  # an odd shape costs its text, never the record
        text = ""
    return observed, lambda: text


def _skeleton(got: Skimmed) -> dict[str, Any]:
    """The answer as its reader sees it: the kept top-level fields, the choices' own usage
    reports, the output items."""
    obj = got.top
    if _CHOICE_USAGE in got.nested:
        obj["choices"] = [{"usage": u} for u in got.nested[_CHOICE_USAGE]]
    if _OUTPUT_ITEM in got.nested:
        obj["output"] = got.nested[_OUTPUT_ITEM]
    return obj
