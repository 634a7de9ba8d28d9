"""What an upstream reported: token usage per dialect (SPEC "Usage extraction"), and the
reading of whole (non-streamed) response bodies.

Every parser here takes untrusted JSON and never raises: a field of the wrong type, a
bool, a negative or absurd number is treated as not reported and the usage is flagged;
an object with no token field at all is no usage (None), which is not the same as 0.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

# A thousand times a 1M-token context window: beyond any real request, such a count is a bug
# upstream (or garbage), not usage, and would price one record at thousands of dollars.
MAX_TOKENS = 10**9
MAX_META = 256  # response metadata kept per record (model, tier, id)

NEGATIVE_CLAMPED = "negative_clamped"
INVALID_FIELD = "invalid_usage_field"
PARTIAL_USAGE = "partial_usage"
READER_ERROR = "reader_error"
TAP_EVENT_ERROR = "tap_event_error"


class _Fields:
    """Reads integer token fields, remembering whether any was present or malformed."""

    __slots__ = ("flags", "seen")

    def __init__(self) -> None:
        self.seen = False
        self.flags: list[str] = []

    def get(self, obj: object, key: str) -> int | None:
        if not isinstance(obj, dict):
            return None
        v = obj.get(key)
        if v is None:
            return None
        if type(v) is int and 0 <= v <= MAX_TOKENS:
            self.seen = True
            return v
        if INVALID_FIELD not in self.flags:
            self.flags.append(INVALID_FIELD)
        return None

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
        details = u.get("prompt_tokens_details")
        cached = f.get(details, "cached_tokens")
        if cached is None:
            cached = f.get(u, "cached_tokens")  # Moonshot reports it at the top level
        write = f.get(details, "cache_write_tokens")
        reasoning = f.get(u.get("completion_tokens_details"), "reasoning_tokens")
        hit = f.get(u, "prompt_cache_hit_tokens")
        miss = f.get(u, "prompt_cache_miss_tokens")
        if not f.seen:
            return None
        if miss is not None:  # DeepSeek: the miss count is the uncached input itself
            cache_read = hit if hit is not None else (cached or 0)
            inp, cache_write = miss, 0
        else:
            cache_read = hit if hit is not None else (cached or 0)
            cache_write = write or 0
            inp = f.input_after_cache(prompt or 0, cache_read, cache_write)
            if prompt is None:
                f.flags.append(PARTIAL_USAGE)
        return cls(inp, cache_read, cache_write, completion or 0, reasoning, tuple(f.flags))

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
        inp = f.input_after_cache(total or 0, cache_read, cache_write)
        if total is None or output is None:
            f.flags.append(PARTIAL_USAGE)
        return cls(inp, cache_read, cache_write, output or 0, reasoning, tuple(f.flags))

    @classmethod
    def from_anthropic(cls, u: object) -> Usage | None:
        """Anthropic Messages usage: input_tokens already excludes both cache categories."""
        if not isinstance(u, dict):
            return None
        f = _Fields()
        inp = f.get(u, "input_tokens")
        cache_read = f.get(u, "cache_read_input_tokens")
        cache_write = f.get(u, "cache_creation_input_tokens")
        if cache_write is None:
            nested = u.get("cache_creation")  # per-TTL split; the top-level sum is missing
            a, b = f.get(nested, "ephemeral_5m_input_tokens"), f.get(nested, "ephemeral_1h_input_tokens")
            cache_write = None if a is None and b is None else (a or 0) + (b or 0)
            if cache_write is not None and cache_write > MAX_TOKENS:  # each part passed, their sum cannot
                f.flags.append(INVALID_FIELD)
                cache_write = None
        output = f.get(u, "output_tokens")
        if not f.seen:
            return None
        if inp is None or output is None:
            f.flags.append(PARTIAL_USAGE)
        return cls(inp or 0, cache_read or 0, cache_write or 0, output or 0, None, tuple(f.flags))


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


def meta(v: object) -> str | None:
    """A response's string field, bounded; anything else is not reported."""
    return v[:MAX_META] if isinstance(v, str) and v else None


def loads(data: bytes | str) -> Any:
    """JSON or None: a body that does not parse is simply not a report."""
    try:
        return orjson.loads(data)
    except (orjson.JSONDecodeError, TypeError):
        return None


def openai_usage(obj: dict[str, Any]) -> Usage | None:
    """Top-level usage beats one inside a choice (and Groq's x_groq.usage)."""
    u = Usage.from_openai(obj.get("usage"))
    if u is not None:
        return u
    choices = obj.get("choices")
    if isinstance(choices, list):
        for c in choices:
            if isinstance(c, dict) and (u := Usage.from_openai(c.get("usage"))) is not None:
                return u
    x = obj.get("x_groq")
    return Usage.from_openai(x.get("usage")) if isinstance(x, dict) else None


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
    observe, text = reader
    try:
        observed = observe(obj)
    except Exception:  # an odd shape no reader foresaw: metering must never break the relay
        return Observed(faults=(READER_ERROR,)), str

    def completion_text() -> str:
        try:
            return text(obj)
        except Exception:
            return ""

    return observed, completion_text


def _chat_text(obj: dict[str, Any]) -> str:
    out: list[str] = []
    for c in _dicts(obj.get("choices")):
        msg = c.get("message")
        if isinstance(msg, dict):
            _strs(out, msg, ("content", "reasoning_content", "reasoning", "refusal"))
            _parts(out, msg.get("content"))
            for call in _dicts(msg.get("tool_calls")):
                _strs(out, call.get("function"), ("name", "arguments"))
            _strs(out, msg.get("function_call"), ("name", "arguments"))
        _strs(out, c, ("text",))  # legacy completions
    return "\n".join(out)


def _chat_observed(obj: dict[str, Any]) -> Observed:
    return _openai_observed(obj, openai_usage(obj))


def _no_text(obj: dict[str, Any]) -> str:
    return ""


def _responses_text(obj: dict[str, Any]) -> str:
    return "\n".join(responses_text(obj))


def responses_observed(resp: dict[str, Any]) -> Observed:
    """A Responses API `response` object (the body, or the one inside a stream's event)."""
    return Observed(Usage.from_responses(resp.get("usage")), meta(resp.get("model")),
                    meta(resp.get("service_tier")), None, meta(resp.get("id")))


def responses_text(resp: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for item in _dicts(resp.get("output")):
        kind = item.get("type")
        if kind == "message":
            for part in _dicts(item.get("content")):
                _strs(out, part, ("text", "refusal"))
        elif kind == "reasoning":
            for key in ("summary", "content"):
                for part in _dicts(item.get(key)):
                    _strs(out, part, ("text",))
        elif kind in ("function_call", "custom_tool_call"):
            _strs(out, item, ("name", "arguments", "input"))
    return out


def _messages_text(obj: dict[str, Any]) -> str:
    out: list[str] = []
    for block in _dicts(obj.get("content")):
        _strs(out, block, ("text", "thinking"))
        if block.get("type") in ("tool_use", "server_tool_use"):
            _strs(out, block, ("name",))
            if "input" in block:
                # Nested deeper than orjson writes: lose its text, not the usage.
                with contextlib.suppress(orjson.JSONEncodeError):
                    out.append(orjson.dumps(block["input"], default=str).decode())
    return "\n".join(out)


def _messages_observed(obj: dict[str, Any]) -> Observed:
    return anthropic_observed(obj, Usage.from_anthropic(obj.get("usage")))


def anthropic_observed(msg: dict[str, Any], usage: Usage | None) -> Observed:
    u = msg.get("usage")
    tier = meta(u.get("service_tier")) if isinstance(u, dict) else None
    speed = meta(u.get("speed")) if isinstance(u, dict) else None
    return Observed(usage, meta(msg.get("model")), tier, speed, meta(msg.get("id")))


def _openai_observed(obj: dict[str, Any], usage: Usage | None) -> Observed:
    return Observed(usage, meta(obj.get("model")), meta(obj.get("service_tier")), None, meta(obj.get("id")))


def _dicts(v: object) -> list[dict[str, Any]]:
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def _strs(out: list[str], obj: object, keys: tuple[str, ...]) -> None:
    if isinstance(obj, dict):
        for k in keys:
            v = obj.get(k)
            if isinstance(v, str) and v:
                out.append(v)


def _parts(out: list[str], content: object) -> None:
    """Content given as a list of parts, as some servers send it."""
    for part in _dicts(content):
        _strs(out, part, ("text",))


# endpoint -> (what the body reports, its completion text)
_BODIES: dict[str, tuple[Callable[[dict[str, Any]], Observed], Callable[[dict[str, Any]], str]]] = {
    "chat": (_chat_observed, _chat_text),
    "completions": (_chat_observed, _chat_text),
    "embeddings": (_chat_observed, _no_text),
    "responses": (responses_observed, _responses_text),
    "messages": (_messages_observed, _messages_text),
}
