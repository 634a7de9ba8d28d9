"""What an upstream reported: token usage per dialect (SPEC "Usage extraction"), and the
reading of whole (non-streamed) response bodies.

Every parser here takes untrusted JSON and never raises: a field of the wrong type, a
bool, a negative or absurd number is treated as not reported and the usage is flagged;
an object with no token field at all is no usage (None), which is not the same as 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import orjson

from pricing.calculator import MAX_FEE_CALLS
from proxy.protocol.body_text import chat_text, messages_text, no_text, responses_body_text
from proxy.protocol.cost import provider_cost, reports_cost

# A thousand times a 1M-token context window: beyond any real request, such a count is a bug
# upstream (or garbage), not usage, and would price one record at thousands of dollars.
MAX_TOKENS = 10**9
MAX_META = 256  # response metadata kept per record (model, tier, id)

NEGATIVE_CLAMPED = "negative_clamped"
INVALID_FIELD = "invalid_usage_field"
PARTIAL_USAGE = "partial_usage"
READER_ERROR = "reader_error"
TAP_EVENT_ERROR = "tap_event_error"
OUTPUT_FROM_TOTAL = "output_from_total"  # total_tokens beyond the categories billed as (hidden) output
FROM_TIMINGS = "usage_from_timings"  # llama-server's own counts from its `timings`, in a stream with no usage
TOTAL_MISMATCH = "total_mismatch"  # the same, on an upstream whose hidden_output is "flag": only flagged
# Audio or image tokens reported inside the counts: providers bill them at their own (higher) rates,
# which no price entry holds, so the record's cost prices them as text and is only a lower bound.
AUDIO_UNPRICED = "audio_unpriced"
IMAGE_UNPRICED = "image_unpriced"
# (key in a *_tokens_details object, flag) in the chat/completions and Responses dialects.
_MODALITIES = (("audio_tokens", AUDIO_UNPRICED), ("image_tokens", IMAGE_UNPRICED))


class _Fields:
    """Reads integer token fields, remembering whether any was present or malformed."""

    __slots__ = ("flags", "seen")

    def __init__(self) -> None:
        self.seen = False
        self.flags: list[str] = []

    def get(self, obj: object, key: str, most: int = MAX_TOKENS) -> int | None:
        if not isinstance(obj, dict):
            return None
        v = obj.get(key)
        if v is None:
            return None
        if type(v) is int and 0 <= v <= most:
            self.seen = True
            return v
        self.invalid()
        return None

    def invalid(self) -> None:
        if INVALID_FIELD not in self.flags:
            self.flags.append(INVALID_FIELD)

    def modalities(self, *details: object) -> None:
        """Flag audio and image tokens counted in any of the `details` objects (a 0 is no such token)."""
        for key, flag in _MODALITIES:
            # Every field is read (no short cut): a malformed one after a counted one is flagged too.
            if any([self.get(d, key) for d in details]) and flag not in self.flags:
                self.flags.append(flag)

    def input_after_cache(self, total: int, cache_read: int, cache_write: int) -> int:
        rest = total - cache_read - cache_write
        if rest < 0:
            self.flags.append(NEGATIVE_CLAMPED)
            return 0
        return rest


@dataclass(slots=True)
class Usage:
    """Billing categories partition the tokens; reasoning is a subset of output."""

    input_tokens: int  # uncached input
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int  # reasoning included
    reasoning_tokens: int | None  # None: the dialect did not report it
    flags: tuple[str, ...] = ()
    cache_write_1h_tokens: int = 0  # cache writes with a 1-hour TTL (Anthropic); apart from cache_write
    web_search_calls: int = 0  # per-call fee: web searches the provider ran
    total_tokens: int | None = None  # the report's own total, where it gives one (hidden output)
    provider_cost_units: int | None = None  # what the provider says it charged, 10^-10 USD, exact
    iterations: tuple[Usage, ...] = ()  # Anthropic server-side compaction passes; the fields above are their sums
    cache_ttl_reported: bool = False  # the upstream split its cache writes by TTL (else the request's TTL holds)

    @property
    def input_side_tokens(self) -> int:
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens + self.cache_write_1h_tokens

    @classmethod
    def from_openai(cls, u: object) -> Usage | None:
        """Chat, completions and embeddings usage, incl. Moonshot, DeepSeek and vLLM shapes."""
        if not isinstance(u, dict):
            return None
        f = _Fields()
        prompt = f.get(u, "prompt_tokens")
        completion = f.get(u, "completion_tokens")
        # A field that is not there reads as None: the tests on presence below only spare the
        # reader's calls on the fields most reports leave out (it runs on every request).
        details = u.get("prompt_tokens_details")
        completion_details = u.get("completion_tokens_details")
        cached = f.get(details, "cached_tokens") if details is not None else None
        if cached is None:
            cached = f.get(u, "cached_tokens")  # Moonshot reports it at the top level
        write = f.get(details, "cache_write_tokens") if details is not None else None
        reasoning = f.get(completion_details, "reasoning_tokens") if completion_details is not None else None
        hit = f.get(u, "prompt_cache_hit_tokens") if "prompt_cache_hit_tokens" in u else None
        miss = f.get(u, "prompt_cache_miss_tokens") if "prompt_cache_miss_tokens" in u else None
        if not f.seen:
            return None
        total = f.get(u, "total_tokens")  # read after: a total alone is no report
        if details is not None or completion_details is not None:  # else no modality to read
            f.modalities(details, completion_details)  # after too: no count of their own
        if miss is not None:  # DeepSeek: the miss count is the uncached input itself
            cache_read = hit if hit is not None else (cached or 0)
            inp, cache_write = miss, 0
        else:
            cache_read = hit if hit is not None else (cached or 0)
            cache_write = write or 0
            inp = f.input_after_cache(prompt or 0, cache_read, cache_write)
            if prompt is None:
                f.flags.append(PARTIAL_USAGE)
        return cls(inp, cache_read, cache_write, completion or 0, reasoning, tuple(f.flags), total_tokens=total)

    @classmethod
    def from_llama_timings(cls, t: object) -> Usage | None:
        """llama-server's `timings` (its last stream chunk carries them even when it ignores
        include_usage): `prompt_n` prompt tokens evaluated, `cache_n` reused from its cache,
        `predicted_n` generated. Its own counts, so better than an estimate, and flagged."""
        f = _Fields()
        prompt, cached, predicted = f.get(t, "prompt_n"), f.get(t, "cache_n"), f.get(t, "predicted_n")
        if prompt is None or predicted is None:
            return None
        return cls(prompt, cached or 0, 0, predicted, None, (*f.flags, FROM_TIMINGS))

    @classmethod
    def from_responses(cls, u: object) -> Usage | None:
        """OpenAI Responses API usage."""
        if not isinstance(u, dict):
            return None
        f = _Fields()
        total = f.get(u, "input_tokens")
        details = u.get("input_tokens_details")
        cache_read = f.get(details, "cached_tokens") or 0
        cache_write = f.get(details, "cache_write_tokens") or 0
        output = f.get(u, "output_tokens")
        reasoning = f.get(u.get("output_tokens_details"), "reasoning_tokens")
        if not f.seen:
            return None
        everything = f.get(u, "total_tokens")
        f.modalities(details, u.get("output_tokens_details"))
        inp = f.input_after_cache(total or 0, cache_read, cache_write)
        if total is None or output is None:
            f.flags.append(PARTIAL_USAGE)
        return cls(inp, cache_read, cache_write, output or 0, reasoning, tuple(f.flags), total_tokens=everything)

    @classmethod
    def from_anthropic(cls, u: object) -> Usage | None:
        """Anthropic Messages usage: input_tokens already excludes both cache categories; with
        server-side compaction (`iterations`) each category is the sum over the passes."""
        if not isinstance(u, dict):
            return None
        f = _Fields()
        top = _anthropic_pass(f, u)
        passes = tuple(p for it in _dicts(u.get("iterations")) if (p := _anthropic_pass(f, it)) is not None)
        calls = f.get(u.get("server_tool_use"), "web_search_requests", MAX_FEE_CALLS) or 0
        if top is None and not passes:
            return None
        if passes:
            summed = _sum_passes(passes, top)
            if summed is None:  # the passes add up to more than any count: garbage, the top level stands
                f.invalid()
                passes = ()
            else:
                top = summed
        assert top is not None
        if not _has(u, "input_tokens") or not _has(u, "output_tokens"):
            f.flags.append(PARTIAL_USAGE)
        return replace(top, flags=tuple(f.flags), web_search_calls=calls, iterations=passes)


def _anthropic_pass(f: _Fields, u: dict[str, Any]) -> Usage | None:
    """The counts of one Anthropic usage object (the whole message, or one iteration of it).

    Cache writes split by TTL: the 1-hour count goes to cache_write_1h, and cache_write is the
    total less it (the total is the parts' sum when only the parts are given)."""
    seen = f.seen
    f.seen = False
    inp = f.get(u, "input_tokens")
    cache_read = f.get(u, "cache_read_input_tokens")
    total = f.get(u, "cache_creation_input_tokens")
    nested = u.get("cache_creation")
    five, hour = f.get(nested, "ephemeral_5m_input_tokens"), f.get(nested, "ephemeral_1h_input_tokens")
    if total is None and (five is not None or hour is not None):
        total = (five or 0) + (hour or 0)
        if total > MAX_TOKENS:  # each part passed, their sum cannot
            f.invalid()
            total, five, hour = None, None, None
    output = f.get(u, "output_tokens")
    thinking = f.get(u.get("output_tokens_details"), "thinking_tokens")
    found, f.seen = f.seen, seen or f.seen
    if not found:
        return None
    split = five is not None or hour is not None
    write = (total or 0) - (hour or 0)
    if write < 0:
        f.flags.append(NEGATIVE_CLAMPED)
        write = 0
    return Usage(inp or 0, cache_read or 0, write, output or 0, thinking,
                 cache_write_1h_tokens=hour or 0, cache_ttl_reported=split)


def _sum_passes(passes: tuple[Usage, ...], top: Usage | None) -> Usage | None:
    """The iterations' sum per category; None when a sum is beyond any count."""
    sums = [sum(getattr(p, k) for p in passes) for k in _SUMMED]
    if max(sums) > MAX_TOKENS:
        return None
    said = [p.reasoning_tokens for p in passes if p.reasoning_tokens is not None]
    reasoning = sum(said) if said else (top.reasoning_tokens if top else None)
    inp, cache_read, cache_write, output, hour = sums
    return Usage(inp, cache_read, cache_write, output, reasoning, cache_write_1h_tokens=hour,
                 cache_ttl_reported=any(p.cache_ttl_reported for p in passes) or bool(top and top.cache_ttl_reported))


_SUMMED = ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens", "cache_write_1h_tokens")


def _has(u: dict[str, Any], key: str) -> bool:
    v = u.get(key)
    return type(v) is int and 0 <= v <= MAX_TOKENS


@dataclass(slots=True)
class Observed:
    """What a response told us about itself."""

    usage: Usage | None = None
    model: str | None = None
    service_tier: str | None = None
    speed: str | None = None
    upstream_request_id: str | None = None
    faults: tuple[str, ...] = ()  # what could not be read (proxy/protocol/names.py FAULT_KINDS)
    inference_geo: str | None = None  # Anthropic usage.inference_geo: an entry may price it apart
    empty: bool = False  # a stream that carried no event at all (not even its end)


def meta(v: object) -> str | None:
    """A response's string field, bounded; anything else is not reported."""
    return v[:MAX_META] if isinstance(v, str) and v else None


def loads(data: bytes | str) -> Any:
    """JSON or None: a body that does not parse is simply not a report."""
    try:
        return orjson.loads(data)
    except (orjson.JSONDecodeError, TypeError):
        return None


def openai_usage(obj: dict[str, Any], raw: str | bytes) -> Usage | None:
    """Top-level usage beats one inside a choice (and Groq's x_groq.usage); `raw` is the text
    `obj` was read from, where a provider's cost is read exactly."""
    top = obj.get("usage")
    u = Usage.from_openai(top)
    if u is not None:
        return with_provider_cost(u, top, raw)
    choices = obj.get("choices")
    if isinstance(choices, list):
        for c in choices:
            if isinstance(c, dict) and (u := Usage.from_openai(c.get("usage"))) is not None:
                return u
    x = obj.get("x_groq")
    return Usage.from_openai(x.get("usage")) if isinstance(x, dict) else None


def with_provider_cost(u: Usage | None, obj: object, raw: str | bytes) -> Usage | None:
    """`u` with the cost its usage object `obj` reports (OpenRouter, xAI), if any."""
    if u is None or not isinstance(obj, dict) or not reports_cost(obj):
        return u
    got = provider_cost(obj, raw)
    flags = [*u.flags, *got.flags]
    if got.invalid and INVALID_FIELD not in flags:
        flags.append(INVALID_FIELD)
    return replace(u, provider_cost_units=got.units, flags=tuple(flags))


def web_search_calls(output: object) -> int | None:
    """OpenAI Responses: the distinct web_search_call items of a final `output` that searched
    (`action.type` "search", or no action given); None beyond MAX_FEE_CALLS (garbage)."""
    ids: set[object] = set()
    unnamed = 0
    for item in _dicts(output):
        if item.get("type") != "web_search_call":
            continue
        action = item.get("action")
        kind = action.get("type") if isinstance(action, dict) else None
        if kind is not None and kind != "search":
            continue  # open_page, find_in_page: no search was billed
        key = item.get("id")
        if isinstance(key, str) and key:
            ids.add(key)
        else:
            unnamed += 1
    n = len(ids) + unnamed
    return n if n <= MAX_FEE_CALLS else None


def settle(usage: Usage, request: object, hidden_output_from_total: bool) -> Usage:
    """What the report means once the request and the upstream's habits are known; the meter
    calls it before pricing.

    1. TTL: when no event split the cache writes by TTL, a `cache_control` with `ttl: "1h"`
       in the (Anthropic) request makes them 1-hour writes; the default is 5 minutes.
    2. Hidden output: `total_tokens` beyond the input side and output is output the provider
       bills (xAI's reasoning, Gemini's thinking). With `hidden_output_from_total` it is added
       to output (reasoning is the reported count, else the difference), flagged
       output_from_total; otherwise it is only flagged total_mismatch.
    """
    u = usage
    if not u.cache_ttl_reported and (u.cache_write_tokens or any(p.cache_write_tokens for p in u.iterations)) \
            and _asks_1h(request):
        u = replace(_to_1h(u), iterations=tuple(_to_1h(p) for p in u.iterations))
    if u.total_tokens is not None:
        hidden = u.total_tokens - u.input_side_tokens - u.output_tokens
        if hidden > 0 and hidden_output_from_total:
            reasoning = u.reasoning_tokens if u.reasoning_tokens is not None else hidden
            u = replace(u, output_tokens=u.output_tokens + hidden, reasoning_tokens=reasoning,
                        flags=(*u.flags, OUTPUT_FROM_TOTAL))
        elif hidden > 0:
            u = replace(u, flags=(*u.flags, TOTAL_MISMATCH))
    return u


def _to_1h(u: Usage) -> Usage:
    return replace(u, cache_write_tokens=0, cache_write_1h_tokens=u.cache_write_1h_tokens + u.cache_write_tokens)


def _asks_1h(request: object) -> bool:
    """Any cache breakpoint of the request with a 1-hour TTL: the top-level (automatic) one, or
    one on a system block, a tool, or a message's content block (a tool result's too)."""
    if not isinstance(request, dict):
        return False
    blocks: list[dict[str, Any]] = [request, *_dicts(request.get("system")), *_dicts(request.get("tools"))]
    for msg in _dicts(request.get("messages")):
        for block in _dicts(msg.get("content")):
            blocks.append(block)
            blocks.extend(_dicts(block.get("content")))
    for b in blocks:
        cc = b.get("cache_control")
        if isinstance(cc, dict) and cc.get("ttl") == "1h":
            return True
    return False


def parse_body(endpoint: str, body: bytes) -> tuple[Observed, str]:
    """Usage and metadata of a whole response, plus its completion text for estimating."""
    observed, text = read_body(endpoint, body)
    return observed, text()


def read_body(endpoint: str, body: bytes) -> tuple[Observed, Callable[[], str]]:
    """As parse_body, but the text is read only if asked for: most responses report usage."""
    obj = loads(body)
    reader = _BODIES.get(endpoint)
    if not isinstance(obj, dict) or reader is None:
        return Observed(), str
    observed = observe(endpoint, obj, body) or Observed()
    if READER_ERROR in observed.faults:
        return observed, str
    text = reader[1]

    def completion_text() -> str:
        try:
            return text(obj)
        except Exception:
            return ""

    return observed, completion_text


def observe(endpoint: str, obj: dict[str, Any], raw: bytes) -> Observed | None:
    """What a response object already parsed from `raw` reports (a batch result's body inside its
    line): money is read again from `raw`, never from the floats of `obj`. None off the dialects."""
    reader = _BODIES.get(endpoint)
    if reader is None:
        return None
    try:
        return reader[0](obj, raw)
    except Exception:  # an odd shape no reader foresaw: metering must never break the relay
        return Observed(faults=(READER_ERROR,))


def _chat_observed(obj: dict[str, Any], raw: str | bytes) -> Observed:
    return _openai_observed(obj, openai_usage(obj, raw))


def responses_observed(resp: dict[str, Any], raw: str | bytes) -> Observed:
    """A Responses API `response` object (the body, or the one inside a stream's event, whose
    text is `raw`), with the web searches of its final `output`."""
    top = resp.get("usage")
    usage = with_provider_cost(Usage.from_responses(top), top, raw)
    if usage is not None:
        calls = web_search_calls(resp.get("output"))
        if calls is None:
            usage.flags = (*usage.flags, INVALID_FIELD) if INVALID_FIELD not in usage.flags else usage.flags
        else:
            usage.web_search_calls = calls
    return Observed(usage, meta(resp.get("model")), meta(resp.get("service_tier")), None, meta(resp.get("id")))


def _messages_observed(obj: dict[str, Any], raw: str | bytes) -> Observed:
    return anthropic_observed(obj, Usage.from_anthropic(obj.get("usage")))


def anthropic_observed(msg: dict[str, Any], usage: Usage | None) -> Observed:
    u = msg.get("usage")
    if not isinstance(u, dict):
        return Observed(usage, meta(msg.get("model")), None, None, meta(msg.get("id")))
    return Observed(usage, meta(msg.get("model")), meta(u.get("service_tier")), meta(u.get("speed")),
                    meta(msg.get("id")), inference_geo=meta(u.get("inference_geo")))


def _openai_observed(obj: dict[str, Any], usage: Usage | None) -> Observed:
    return Observed(usage, meta(obj.get("model")), meta(obj.get("service_tier")), None, meta(obj.get("id")))


def _dicts(v: object) -> list[dict[str, Any]]:
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


# endpoint -> (what the body reports, its completion text)
_BODIES: dict[str, tuple[Callable[[dict[str, Any], bytes], Observed], Callable[[dict[str, Any]], str]]] = {
    "chat": (_chat_observed, chat_text),
    "completions": (_chat_observed, chat_text),
    "embeddings": (_chat_observed, no_text),
    "responses": (responses_observed, responses_body_text),
    "messages": (_messages_observed, messages_text),
}
