"""Fuzzing what upstreams send: thousands of generated usage objects, bodies and streams.

The rules checked on every case: nothing raises out of the readers; every count is an
int in [0, MAX_TOKENS]; a field that was present but not a valid count is flagged; the
billing categories still add up to the reported prompt (or the clamp is flagged); a
stream's bytes reach the client unchanged, whatever the chunking, truncation or garbage.
"""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime
from decimal import MAX_EMAX, MIN_EMIN, ROUND_HALF_EVEN, Context, Decimal
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from pricing import PriceBook, default_tables_dir, load_dir
from pricing.calculator import MAX_PROVIDER_COST_UNITS
from proxy.ledger.record import Record
from proxy.metering.estimate.estimator import Estimator
from proxy.metering.meter import Exchange, Meter
from proxy.metrics.metrics import Metrics
from proxy.protocol.cost import PROVIDER_COST_ROUNDED
from proxy.protocol.sse import SSEReader
from proxy.protocol.tap import StreamTap
from proxy.protocol.usage import (
    AUDIO_UNPRICED,
    IMAGE_UNPRICED,
    INVALID_FIELD,
    MAX_TOKENS,
    NEGATIVE_CLAMPED,
    Usage,
    parse_body,
)
from proxy.settings import Settings, Workloads

MANY = settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SOME = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Token fields as upstreams have been seen to get them wrong: huge, negative, floats, strings, bools.
counts = st.one_of(st.integers(0, 5000), st.integers(0, MAX_TOKENS), st.integers(MAX_TOKENS // 2, MAX_TOKENS),
                   st.integers(MAX_TOKENS - 2, MAX_TOKENS))
junk = st.one_of(st.integers(-(2**70), -1), st.integers(MAX_TOKENS + 1, 2**80), st.booleans(),
                 st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6), st.just("12"),
                 st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
value = st.one_of(counts, counts, junk, st.none())


def _valid(v: object) -> bool:
    return type(v) is int and 0 <= v <= MAX_TOKENS


def _bad(v: object) -> bool:
    return v is not None and not _valid(v)


def _maybe(**fields: Any) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=fields)


openai_usage = _maybe(
    prompt_tokens=value, completion_tokens=value, total_tokens=value, cached_tokens=value,
    prompt_cache_hit_tokens=value, prompt_cache_miss_tokens=value,
    prompt_tokens_details=st.one_of(value, _maybe(cached_tokens=value, cache_write_tokens=value, audio_tokens=value,
                                                  image_tokens=value)),
    completion_tokens_details=st.one_of(value, _maybe(reasoning_tokens=value, audio_tokens=value)),
)
responses_usage = _maybe(
    input_tokens=value, output_tokens=value, total_tokens=value,
    input_tokens_details=st.one_of(value, _maybe(cached_tokens=value, cache_write_tokens=value, audio_tokens=value,
                                                 image_tokens=value)),
    output_tokens_details=st.one_of(value, _maybe(reasoning_tokens=value, audio_tokens=value)),
)
anthropic_usage = _maybe(
    input_tokens=value, output_tokens=value, cache_read_input_tokens=value, cache_creation_input_tokens=value,
    cache_creation=st.one_of(value, _maybe(ephemeral_5m_input_tokens=value, ephemeral_1h_input_tokens=value)),
    output_tokens_details=st.one_of(value, _maybe(thinking_tokens=value)),
    service_tier=st.one_of(st.none(), st.text(max_size=8)),
)


def _in(obj: object, key: str) -> object:
    return obj.get(key) if isinstance(obj, dict) else None


def _read_fields(dialect: str, u: dict[str, Any]) -> list[object]:
    """The raw values the dialect's reader takes counts from (SPEC "Usage extraction")."""
    if dialect == "openai":
        details = u.get("prompt_tokens_details")
        out = [u.get("prompt_tokens"), u.get("completion_tokens"), _in(details, "cached_tokens"),
               _in(details, "cache_write_tokens"), _in(u.get("completion_tokens_details"), "reasoning_tokens"),
               u.get("prompt_cache_hit_tokens"), u.get("prompt_cache_miss_tokens")]
        if not _valid(_in(details, "cached_tokens")):
            out.append(u.get("cached_tokens"))  # Moonshot's top-level form is read only then
        return _and_total(out, u, _modalities(details, u.get("completion_tokens_details")))
    if dialect == "responses":
        details = u.get("input_tokens_details")
        return _and_total([u.get("input_tokens"), u.get("output_tokens"), _in(details, "cached_tokens"),
                           _in(details, "cache_write_tokens"), _in(u.get("output_tokens_details"), "reasoning_tokens")],
                          u, _modalities(details, u.get("output_tokens_details")))
    out = [u.get(k) for k in ("input_tokens", "output_tokens", "cache_read_input_tokens",
                              "cache_creation_input_tokens")]
    out.append(_in(u.get("output_tokens_details"), "thinking_tokens"))
    nested = u.get("cache_creation")
    parts = [_in(nested, "ephemeral_5m_input_tokens"), _in(nested, "ephemeral_1h_input_tokens")]
    out += parts  # the 1h part is read whatever the total: it is a category of its own
    if not _valid(u.get("cache_creation_input_tokens")) and any(_valid(v) for v in parts):
        out.append(sum(v for v in parts if _valid(v)))  # type: ignore[misc]  # the sum is the total: a count too
    return out


def _modalities(inputs: object, outputs: object) -> list[object]:
    return [_in(inputs, "audio_tokens"), _in(inputs, "image_tokens"), _in(outputs, "audio_tokens")]


def _and_total(out: list[object], u: dict[str, Any], after: list[object]) -> list[object]:
    """total_tokens, audio and image tokens are read only beside a count: alone they are no report."""
    return [*out, u.get("total_tokens"), *after] if any(_valid(v) for v in out) else out


def check_modalities(u: Usage | None, inputs: object, outputs: object) -> None:
    """Audio or image tokens counted (> 0) flag the record: their rates are in no price entry."""
    if u is None:
        return
    audio = any(_valid(v) and v for v in (_in(inputs, "audio_tokens"), _in(outputs, "audio_tokens")))
    image = _valid(_in(inputs, "image_tokens")) and bool(_in(inputs, "image_tokens"))
    assert (AUDIO_UNPRICED in u.flags, IMAGE_UNPRICED in u.flags) == (audio, image), u.flags


def check(u: Usage | None, raw: list[object]) -> None:
    """The rules every extracted usage obeys."""
    if u is None:
        assert not any(_valid(v) for v in raw)  # a valid count was not thrown away
        return
    for n in (u.input_tokens, u.cache_read_tokens, u.cache_write_tokens, u.output_tokens):
        assert type(n) is int and 0 <= n <= MAX_TOKENS, n
    assert u.reasoning_tokens is None or (type(u.reasoning_tokens) is int and 0 <= u.reasoning_tokens <= MAX_TOKENS)
    # A field that was there but not a count is flagged; a clean report is not.
    assert (INVALID_FIELD in u.flags) == any(_bad(v) for v in raw), (raw, u.flags)


@MANY
@given(openai_usage)
def test_openai_usage_fuzz(u: dict[str, Any]) -> None:
    got = Usage.from_openai(u)
    check(got, _read_fields("openai", u))
    check_modalities(got, u.get("prompt_tokens_details"), u.get("completion_tokens_details"))
    prompt = u.get("prompt_tokens")
    miss = u.get("prompt_cache_miss_tokens")
    if got is not None and _valid(prompt) and not _valid(miss) and NEGATIVE_CLAMPED not in got.flags:
        assert got.input_tokens + got.cache_read_tokens + got.cache_write_tokens == prompt
    if got is not None and NEGATIVE_CLAMPED in got.flags:
        assert got.input_tokens == 0


@MANY
@given(responses_usage)
# A counted input audio field must not hide a malformed output one (found by this test in CI).
@example({"total_tokens": 0, "output_tokens_details": {"reasoning_tokens": 0, "audio_tokens": -1},
          "input_tokens_details": {"audio_tokens": 1}})
def test_responses_usage_fuzz(u: dict[str, Any]) -> None:
    got = Usage.from_responses(u)
    check(got, _read_fields("responses", u))
    check_modalities(got, u.get("input_tokens_details"), u.get("output_tokens_details"))
    if got is not None and _valid(u.get("input_tokens")) and NEGATIVE_CLAMPED not in got.flags:
        assert got.input_tokens + got.cache_read_tokens + got.cache_write_tokens == u["input_tokens"]


@MANY
@given(anthropic_usage)
@example({"input_tokens": 1, "output_tokens": 1,
          "cache_creation": {"ephemeral_5m_input_tokens": MAX_TOKENS, "ephemeral_1h_input_tokens": MAX_TOKENS}})
def test_anthropic_usage_fuzz(u: dict[str, Any]) -> None:
    got = Usage.from_anthropic(u)
    check(got, _read_fields("anthropic", u))
    if got is not None and _valid(u.get("input_tokens")):
        assert got.input_tokens == u["input_tokens"]  # Anthropic's input already excludes the cache


@MANY
@given(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20),
                 st.lists(st.integers(), max_size=3), st.binary(max_size=20)))
def test_usage_that_is_not_an_object(u: object) -> None:
    for reader in (Usage.from_openai, Usage.from_responses, Usage.from_anthropic):
        assert reader(u) is None


# --- whole bodies ------------------------------------------------------------------------

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**66), 2**66), st.floats(allow_nan=False),
                      st.text(max_size=10))
json_tree = st.recursive(json_leaf, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                            st.dictionaries(st.text(max_size=8), kids, max_size=4)),
                         max_leaves=20)
body_keys = st.sampled_from(["usage", "choices", "model", "id", "service_tier", "output", "content", "x_groq",
                             "message", "type", "data"])


def bodies() -> st.SearchStrategy[bytes]:
    shaped = st.fixed_dictionaries({}, optional={
        "usage": st.one_of(openai_usage, responses_usage, anthropic_usage, json_tree),
        "choices": st.lists(st.fixed_dictionaries({}, optional={"usage": openai_usage, "message": json_tree,
                                                                 "text": json_tree, "delta": json_tree}), max_size=3),
        "model": json_tree, "id": json_tree, "output": json_tree, "content": json_tree, "x_groq": json_tree,
    })
    as_json = st.one_of(shaped, st.dictionaries(body_keys, json_tree, max_size=5)).map(
        lambda o: json.dumps(o).encode())
    return st.one_of(as_json, as_json.flatmap(lambda b: st.integers(0, len(b)).map(lambda n: b[:n])), st.binary())


@MANY
@given(st.sampled_from(["chat", "completions", "embeddings", "responses", "messages", "other"]), bodies())
def test_parse_body_fuzz(endpoint: str, body: bytes) -> None:
    observed, text = parse_body(endpoint, body)
    assert isinstance(text, str)
    if observed.usage is not None:
        _counts_ok(observed.usage)
    for meta in (observed.model, observed.service_tier, observed.upstream_request_id):
        assert meta is None or (isinstance(meta, str) and len(meta) <= 256)


def _counts_ok(u: Usage) -> None:
    for n in (u.input_tokens, u.cache_read_tokens, u.cache_write_tokens, u.output_tokens, u.reasoning_tokens or 0):
        assert type(n) is int and 0 <= n <= MAX_TOKENS


# --- provider cost, read from the text --------------------------------------------------

_WIDE = Context(prec=1000, Emax=MAX_EMAX, Emin=MIN_EMIN)
money_text = st.one_of(
    st.decimals(allow_nan=False, allow_infinity=False).map(str),
    st.decimals(min_value=0, max_value=10**9, places=14).map(str),
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(['"0.1"', "true", "false", "null", "[]", "{}", "1e-400", "0.000000000150000000000000000001"]),
)


def _expected_units(text: str, scale: int) -> int | None:
    """The amount as SPEC reads it: exact, half-even, 0 to MAX_PROVIDER_COST_UNITS, else not kept."""
    v = json.loads(text, parse_float=Decimal)
    if type(v) is not int and not isinstance(v, Decimal):
        return None
    d = Decimal(v)
    if d < 0 or len(d.as_tuple().digits) > 100:
        return None
    scaled = d.scaleb(scale, _WIDE)
    if scaled > MAX_PROVIDER_COST_UNITS:
        return None
    return int(scaled.to_integral_value(ROUND_HALF_EVEN, _WIDE))


@MANY
@given(money_text, st.sampled_from(["cost", "cost_in_usd_ticks"]))
def test_provider_cost_fuzz(text: str, key: str) -> None:
    body = b'{"model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"' + key.encode() \
        + b'":' + text.encode() + b"}}"
    u = parse_body("chat", body)[0].usage
    if u is None:  # orjson refused the number (out of a double's range): no report at all
        return
    want = _expected_units(text, 10 if key == "cost" else 0)
    assert u.provider_cost_units == want, (text, u.flags)
    assert (INVALID_FIELD in u.flags) == (want is None and text != "null")
    if want is not None:
        exact = Decimal(json.loads(text, parse_float=Decimal)).scaleb(10 if key == "cost" else 0, _WIDE)
        assert (PROVIDER_COST_ROUNDED in u.flags) == (exact != want)


# --- the SSE reader ----------------------------------------------------------------------

sse_pieces = st.one_of(
    st.sampled_from([b"data: ", b"event: ", b"id: ", b": c", b"\n", b"\r", b"\r\n", b"\n\n", b"\xef\xbb\xbf",
                     b"data: [DONE]\n\n", b"\x00", b"\xff\xfe", b"\xc3(", b"data:{\"usage\":", b"retry: 5"]),
    st.binary(max_size=12),
)


@MANY
@given(st.lists(sse_pieces, max_size=40).map(b"".join), st.lists(st.integers(0, 600), max_size=20))
def test_sse_reader_fuzz(stream: bytes, cuts: list[int]) -> None:
    whole = SSEReader()
    want = whole.feed(stream) + whole.close()
    reader = SSEReader()
    got = []
    edges = [0, *sorted({min(c, len(stream)) for c in cuts}), len(stream)]
    for a, b in itertools.pairwise(edges):
        got += reader.feed(stream[a:b])
    got += reader.close()
    assert b"".join(b.raw for b in got) == stream  # every byte in exactly one block
    assert [(b.event, b.data, b.id, b.complete) for b in got] == [(b.event, b.data, b.id, b.complete)
                                                                    for b in want]


# --- the stream tap ----------------------------------------------------------------------

def _events(endpoint: str, usage: dict[str, Any], data: st.DataObject) -> list[bytes]:
    """A plausible stream of the dialect, carrying the fuzzed usage, with junk events mixed in."""
    def block(obj: Any, name: str | None = None) -> bytes:
        payload = obj if isinstance(obj, str) else json.dumps(obj)
        return (f"event: {name}\n" if name else "").encode() + b"data: " + payload.encode() + b"\n\n"

    junk_blocks = st.one_of(json_tree.map(lambda t: block(t)), st.binary(max_size=30),
                            st.just(b": keep-alive\n\n"), st.just(b"data: {\n\n"))
    if endpoint in ("chat", "completions"):
        out = [block({"choices": [{"index": 0, "delta": {"content": "hi"}, "text": "hi"}], "usage": None}),
               block({"choices": [], "usage": usage}), block("[DONE]")]
    elif endpoint == "responses":
        out = [block({"type": "response.output_text.delta", "delta": "hi"}, "response.output_text.delta"),
               block({"type": "response.completed", "response": {"usage": usage, "model": "m"}}, "response.completed")]
    else:
        out = [block({"type": "message_start", "message": {"usage": usage, "model": "m"}}, "message_start"),
               block({"type": "content_block_delta", "delta": {"type": "text_delta", "text": "hi"}},
                     "content_block_delta"),
               block({"type": "message_delta", "usage": data.draw(anthropic_usage)}, "message_delta"),
               block({"type": "message_stop"}, "message_stop")]
    for _ in range(data.draw(st.integers(0, 3))):
        out.insert(data.draw(st.integers(0, len(out))), data.draw(junk_blocks))
    return out


@SOME
@given(st.sampled_from(["chat", "completions", "responses", "messages"]), st.booleans(), st.data())
def test_stream_tap_fuzz(endpoint: str, drop: bool, data: st.DataObject) -> None:
    usage = data.draw({"responses": responses_usage, "messages": anthropic_usage}.get(endpoint, openai_usage))
    stream = b"".join(_events(endpoint, usage, data))
    stream = stream[:data.draw(st.integers(0, len(stream)))] if data.draw(st.booleans()) else stream  # cut anywhere
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=15))
    tap = StreamTap(endpoint, drop)
    out = bytearray()
    edges = [0, *sorted(set(cuts)), len(stream)]
    for a, b in itertools.pairwise(edges):
        out += tap.feed(stream[a:b])
    out += tap.finish()
    if not drop or endpoint not in ("chat", "completions"):
        assert bytes(out) == stream  # untouched, byte for byte
    else:
        assert stream.count(b'"delta"') == bytes(out).count(b'"delta"')  # no content event dropped
    observed = tap.observed()
    if observed.usage is not None:
        _counts_ok(observed.usage)
    assert isinstance(tap.completion_text(), str)


# --- all the way to a record -------------------------------------------------------------

class _Kept:
    """The meter's journal: records kept in memory."""

    def __init__(self) -> None:
        self.records: list[Record] = []

    def append(self, record: Record) -> None:
        self.records.append(record)


_BOOK = PriceBook(load_dir(default_tables_dir()), {})
_KEPT = _Kept()
_METER = Meter(_BOOK, Estimator(), Workloads(), _KEPT, Metrics(Settings(), _BOOK, CollectorRegistry()))


@SOME
@given(st.sampled_from(["chat", "responses", "messages"]), st.data())
def test_no_recorded_count_is_negative_or_absurd_without_a_flag(endpoint: str, data: st.DataObject) -> None:
    usage = data.draw({"responses": responses_usage, "messages": anthropic_usage}.get(endpoint, openai_usage))
    body = {"usage": usage, "model": "kimi-k3.1-pro", "choices": [], "content": []}
    observed, _ = parse_body(endpoint, json.dumps(body).encode())
    ex = Exchange(start=datetime.now(UTC), t0=0.0, endpoint=endpoint, tenant="t", code=200)
    rec = _METER.record(ex, observed, observed.usage, "upstream")
    assert _KEPT.records[-1] is rec
    for n in (rec.input_tokens, rec.cache_read_tokens, rec.cache_write_tokens, rec.output_tokens):
        assert 0 <= n <= MAX_TOKENS
    assert rec.cost_units is None or rec.cost_units >= 0
    raw = _read_fields({"chat": "openai"}.get(endpoint, endpoint.replace("messages", "anthropic")), usage)
    if any(_bad(v) for v in raw):
        assert rec.flags  # flagged: invalid_usage_field, or no_usage when nothing valid was left
    _KEPT.records.clear()


_ESTIMATOR = Estimator()
request_trees = st.one_of(json_tree, st.fixed_dictionaries({}, optional={
    "messages": st.lists(st.one_of(json_tree, st.fixed_dictionaries(
        {"role": st.one_of(st.sampled_from(["user", "system", "tool"]), json_tree)},
        optional={"content": json_tree, "name": json_tree})), max_size=4),
    "prompt": json_tree, "input": json_tree, "system": json_tree, "instructions": json_tree,
}))


@SOME
@given(st.sampled_from(["chat", "completions", "embeddings", "responses", "messages", "other"]), request_trees)
def test_estimates_of_any_request_are_counts(endpoint: str, request: Any) -> None:
    n = _ESTIMATOR.prompt_tokens(endpoint, "kimi-k3.1-pro", request)
    assert type(n) is int and n >= 0
