"""Bill-exact usage for the cases the real recordings lack, as wire-exact bodies and streams
(SPEC "Usage extraction"): 1-hour cache writes, the request's TTL, OpenRouter's BYOK cost,
money with more digits than a float holds, compaction iterations in a stream, web searches,
and hidden output on an upstream that only flags it."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from pricing.calculator import MAX_FEE_CALLS, MAX_PROVIDER_COST_UNITS
from proxy.protocol.cost import PROVIDER_COST_ROUNDED
from proxy.protocol.tap import StreamTap
from proxy.protocol.usage import (
    INVALID_FIELD,
    MAX_TOKENS,
    NEGATIVE_CLAMPED,
    OUTPUT_FROM_TOTAL,
    PARTIAL_USAGE,
    TOTAL_MISMATCH,
    Observed,
    Usage,
    parse_body,
    settle,
)


def stream(endpoint: str, data: bytes, seed: int = 1) -> Observed:
    """Fed in small random chunks; the client gets every byte."""
    rnd = random.Random(seed)
    tap = StreamTap(endpoint, False)
    out = bytearray()
    at = 0
    while at < len(data):
        n = rnd.randint(1, 23)
        out += tap.feed(data[at:at + n])
        at += n
    out += tap.finish()
    assert bytes(out) == data and tap.done
    return tap.observed()


def body(endpoint: str, data: bytes) -> Usage:
    u = parse_body(endpoint, data)[0].usage
    assert u is not None
    return u


def cats(u: Usage | None) -> tuple[int, int, int, int, int, int | None]:
    """input, cache_read, cache_write (5m), cache_write_1h, output, reasoning."""
    assert u is not None
    return (u.input_tokens, u.cache_read_tokens, u.cache_write_tokens, u.cache_write_1h_tokens, u.output_tokens,
            u.reasoning_tokens)


# --- Anthropic: cache writes split by TTL ---------------------------------------------------------

ANTH_1H_BODY = (
    b'{"model":"claude-sonnet-4-5-20250929","id":"msg_01TTL","type":"message","role":"assistant",'
    b'"content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","stop_sequence":null,'
    b'"usage":{"input_tokens":12,"cache_creation_input_tokens":2148,"cache_read_input_tokens":0,'
    b'"cache_creation":{"ephemeral_5m_input_tokens":148,"ephemeral_1h_input_tokens":2000},'
    b'"output_tokens":7,"service_tier":"standard","inference_geo":"us"}}'
)


def test_anthropic_body_splits_writes_by_ttl() -> None:
    observed, _ = parse_body("messages", ANTH_1H_BODY)
    u = observed.usage
    # 2,148 written: 148 with the 5-minute TTL stay cache_write, 2,000 are 1-hour writes.
    assert cats(u) == (12, 0, 148, 2000, 7, None)
    assert u is not None and u.cache_ttl_reported and u.input_side_tokens == 2160 and u.flags == ()
    assert observed.inference_geo == "us"


def anth_stream(start_usage: str, *delta_usages: str) -> bytes:
    out = [
        b'event: message_start\ndata: {"type":"message_start","message":{"model":"claude-sonnet-4-5-20250929",'
        b'"id":"msg_01S","type":"message","role":"assistant","content":[],"stop_reason":null,'
        b'"stop_sequence":null,"usage":' + start_usage.encode() + b"}}\n\n",
        b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
        b'"content_block":{"type":"text","text":""}}\n\n',
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"Hi"}}\n\n',
        b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
    ]
    out += [b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn",'
            b'"stop_sequence":null},"usage":' + d.encode() + b"}\n\n" for d in delta_usages]
    out.append(b'event: message_stop\ndata: {"type":"message_stop"}\n\n')
    return b"".join(out)


def test_anthropic_stream_keeps_the_last_reported_1h_count() -> None:
    # message_start splits 1,500 written as all 1h; the cumulative delta says 1,800 written, no split:
    # cache_write_1h is the last reported 1h count (1,500), cache_write the last total minus it (300).
    data = anth_stream(
        '{"input_tokens":9,"cache_creation_input_tokens":1500,"cache_read_input_tokens":0,'
        '"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":1500},'
        '"output_tokens":1,"service_tier":"standard","inference_geo":"global"}',
        '{"input_tokens":9,"cache_creation_input_tokens":1800,"cache_read_input_tokens":0,"output_tokens":40}')
    observed = stream("messages", data)
    assert cats(observed.usage) == (9, 0, 300, 1500, 40, None)
    assert observed.usage is not None and observed.usage.cache_ttl_reported
    assert observed.inference_geo == "global"
    # A later split (here only its 5m part) replaces part by part: 1h stays the last one given.
    data = anth_stream(
        '{"input_tokens":9,"cache_creation_input_tokens":1500,"cache_read_input_tokens":0,'
        '"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":1500},"output_tokens":1}',
        '{"input_tokens":9,"cache_creation_input_tokens":1800,"cache_read_input_tokens":0,'
        '"cache_creation":{"ephemeral_5m_input_tokens":300},"output_tokens":40}')
    assert cats(stream("messages", data).usage) == (9, 0, 300, 1500, 40, None)


def test_a_1h_count_above_the_total_is_clamped_and_flagged() -> None:
    u = Usage.from_anthropic({"input_tokens": 1, "output_tokens": 1, "cache_creation_input_tokens": 10,
                              "cache_creation": {"ephemeral_1h_input_tokens": 25}})
    assert cats(u) == (1, 0, 0, 25, 1, None) and u is not None and u.flags == (NEGATIVE_CLAMPED,)


# --- the request's cache_control.ttl, when no event split the writes --------------------------------

# A compatible server that reports only the total (no cache_creation object).
NO_SPLIT = Usage.from_anthropic({"input_tokens": 4, "cache_creation_input_tokens": 3000,
                                 "cache_read_input_tokens": 0, "output_tokens": 20})


def request(**parts: Any) -> dict[str, Any]:
    return {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}], **parts}


ONE_HOUR = {"type": "ephemeral", "ttl": "1h"}


@pytest.mark.parametrize("req", [
    pytest.param(request(cache_control=ONE_HOUR), id="top-level (automatic) breakpoint"),
    pytest.param(request(system=[{"type": "text", "text": "s", "cache_control": ONE_HOUR}]), id="system block"),
    pytest.param(request(tools=[{"name": "f", "input_schema": {}, "cache_control": ONE_HOUR}]), id="tool"),
    pytest.param(request(messages=[{"role": "user", "content": [
        {"type": "text", "text": "long", "cache_control": ONE_HOUR}]}]), id="message block"),
    pytest.param(request(messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                 "content": [{"type": "text", "text": "x", "cache_control": ONE_HOUR}]}]}]), id="inside a tool result"),
])
def test_request_ttl_1h_makes_unsplit_writes_1h(req: dict[str, Any]) -> None:
    assert NO_SPLIT is not None and not NO_SPLIT.cache_ttl_reported
    settled = settle(NO_SPLIT, req, False)
    assert cats(settled) == (4, 0, 0, 3000, 20, None) and settled.flags == ()


@pytest.mark.parametrize("req", [
    None, "not json", request(), request(cache_control={"type": "ephemeral"}),
    request(system=[{"type": "text", "text": "s", "cache_control": {"type": "ephemeral", "ttl": "5m"}}]),
    request(system="a string system prompt", tools="junk", messages=[1, {"content": "x"}]),
])
def test_default_ttl_is_5_minutes(req: object) -> None:
    assert NO_SPLIT is not None and settle(NO_SPLIT, req, False) == NO_SPLIT


def test_a_reported_split_beats_the_request() -> None:
    u = body("messages", ANTH_1H_BODY)
    assert settle(u, request(cache_control=ONE_HOUR), False) == u
    # ... even a split of 0 + 0 (the real API always sends one): the upstream said which TTL it wrote.
    zero = Usage.from_anthropic({"input_tokens": 4, "cache_creation_input_tokens": 0, "output_tokens": 2,
                                 "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0}})
    assert zero is not None and settle(zero, request(cache_control=ONE_HOUR), False) == zero


# --- Anthropic: compaction iterations, thinking, web search ------------------------------------------

ITERATIONS = (
    '{"input_tokens":229,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":5,'
    '"output_tokens_details":{"thinking_tokens":2},'
    '"iterations":[{"cache_creation":{"ephemeral_1h_input_tokens":0,"ephemeral_5m_input_tokens":55096},'
    '"cache_creation_input_tokens":55096,"cache_read_input_tokens":0,"input_tokens":100,"output_tokens":131,'
    '"type":"compaction"},{"cache_creation":{"ephemeral_1h_input_tokens":0,"ephemeral_5m_input_tokens":0},'
    '"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"input_tokens":229,"output_tokens":5,'
    '"type":"message"}],"server_tool_use":{"web_search_requests":3,"web_fetch_requests":1}}'
)


def test_iterations_in_a_stream_are_summed_from_the_last_delta() -> None:
    data = anth_stream(
        '{"input_tokens":229,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,'
        '"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},"output_tokens":1,'
        '"service_tier":"standard"}',
        ITERATIONS)
    u = stream("messages", data).usage
    # 100 + 229 in, 55,096 written (5m), 131 + 5 out; thinking 2 from the top level (no pass reports it).
    assert cats(u) == (329, 0, 55096, 0, 136, 2)
    assert u is not None and u.web_search_calls == 3 and u.flags == ()
    assert [cats(p) for p in u.iterations] == [(100, 0, 55096, 0, 131, None), (229, 0, 0, 0, 5, None)]


def test_thinking_tokens_of_the_passes_are_summed() -> None:
    u = Usage.from_anthropic({"input_tokens": 1, "output_tokens": 9, "iterations": [
        {"input_tokens": 3, "output_tokens": 4, "output_tokens_details": {"thinking_tokens": 1}},
        {"input_tokens": 1, "output_tokens": 9, "output_tokens_details": {"thinking_tokens": 6}}]})
    assert cats(u) == (4, 0, 0, 0, 13, 7)


def test_iterations_beyond_any_count_leave_the_top_level() -> None:
    big = {"input_tokens": MAX_TOKENS, "output_tokens": 1}
    u = Usage.from_anthropic({"input_tokens": 5, "output_tokens": 2, "iterations": [big, big]})
    assert cats(u) == (5, 0, 0, 0, 2, None) and u is not None and u.flags == (INVALID_FIELD,) and not u.iterations


@pytest.mark.parametrize(("requests", "calls", "flags"), [
    (0, 0, ()), (7, 7, ()), (MAX_FEE_CALLS, MAX_FEE_CALLS, ()), (MAX_FEE_CALLS + 1, 0, (INVALID_FIELD,)),
    (-1, 0, (INVALID_FIELD,)), ("2", 0, (INVALID_FIELD,)), (True, 0, (INVALID_FIELD,)), (None, 0, ()),
])
def test_anthropic_web_search_requests(requests: object, calls: int, flags: tuple[str, ...]) -> None:
    u = Usage.from_anthropic({"input_tokens": 1, "output_tokens": 1,
                              "server_tool_use": {"web_search_requests": requests}})
    assert u is not None and (u.web_search_calls, u.flags) == (calls, flags)


# --- OpenAI Responses: web_search_call items ----------------------------------------------------------

def responses_body(*items: dict[str, Any]) -> bytes:
    return json.dumps({"id": "resp_1", "object": "response", "model": "gpt-5", "output": list(items),
                       "tools": [{"type": "web_search"}],
                       "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                                 "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                                 "total_tokens": 15}}).encode()


def ws(id_: str | None, action: object = "absent") -> dict[str, Any]:
    item: dict[str, Any] = {"type": "web_search_call", "status": "completed"}
    if id_ is not None:
        item["id"] = id_
    if action != "absent":
        item["action"] = action
    return item


@pytest.mark.parametrize(("items", "calls"), [
    ((), 0),  # the tool offered, not called
    ((ws("ws_1", {"type": "search", "query": "q"}),), 1),
    ((ws("ws_1", {"type": "search"}), ws("ws_1", {"type": "search"})), 1),  # one item id, counted once
    ((ws("ws_1", {"type": "search"}), ws("ws_2"), ws("ws_3", {"query": "no type"})), 3),  # action or type absent
    ((ws("ws_1", {"type": "open_page", "url": "u"}), ws("ws_2", {"type": "find_in_page"})), 0),  # no search billed
    ((ws(None), ws(None)), 2),  # no id to tell them apart: each counts
    (({"type": "message", "id": "m"}, {"type": "function_call", "id": "f"}), 0),
])
def test_responses_web_search_calls(items: tuple[dict[str, Any], ...], calls: int) -> None:
    u = body("responses", responses_body(*items))
    assert u.web_search_calls == calls and u.flags == ()


def test_responses_web_search_calls_beyond_the_bound_are_garbage() -> None:
    u = body("responses", responses_body(*(ws(f"ws_{i}") for i in range(MAX_FEE_CALLS + 1))))
    assert u.web_search_calls == 0 and u.flags == (INVALID_FIELD,)


# --- provider cost, read from the JSON text -----------------------------------------------------------

def openrouter_chat(usage_tail: str) -> bytes:
    """An OpenRouter chat completion; usage_tail is the text after the token fields."""
    return (b'{"id":"gen-1","provider":"Anthropic","model":"anthropic/claude-sonnet-4.5",'
            b'"object":"chat.completion","created":1762064097,"choices":[{"index":0,"message":'
            b'{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":100,'
            b'"completion_tokens":10,"total_tokens":110' + usage_tail.encode() + b"}}")


@pytest.mark.parametrize(("tail", "units", "flags"), [
    # BYOK: OpenRouter's fee (cost) plus what the provider charged the customer's own key.
    (',"cost":0.0001,"is_byok":true,"cost_details":{"upstream_inference_cost":0.002}', 21_000_000, ()),
    # Not BYOK: upstream_inference_cost repeats cost and is not added.
    (',"cost":0.0021,"is_byok":false,"cost_details":{"upstream_inference_cost":0.0021}', 21_000_000, ()),
    # BYOK without the upstream figure: only OpenRouter's fee is known.
    (',"cost":0.0001,"is_byok":true,"cost_details":{"upstream_inference_cost":null}', 1_000_000, (PARTIAL_USAGE,)),
    # 20 significant digits: 50,000,000,000.500000001 units rounds up. Through a float it would be
    # 50,000,000,000.5, rounded half-even to 50,000,000,000: one unit off.
    (',"cost":5.0000000000500000001', 50_000_000_001, (PROVIDER_COST_ROUNDED,)),
    # 0.00000000105 USD = 10.5 units: half-even gives 10 (a float reads 10.500000000000002 and gives 11).
    (',"cost":0.00000000105', 10, (PROVIDER_COST_ROUNDED,)),
    (',"cost":0.00000000115', 12, (PROVIDER_COST_ROUNDED,)),  # 11.5 -> 12
    (',"cost":1.5e-3', 15_000_000, ()),  # exponent form
    (',"cost":0', 0, ()),
    (',"cost":-0.0', 0, ()),
    (',"cost":10000000', 10**17, ()),  # $10^7: kept
    (',"cost":100000000.00000000001', None, (INVALID_FIELD,)),  # above MAX_PROVIDER_COST_UNITS: not kept
    (',"cost":-0.001', None, (INVALID_FIELD,)),
    (',"cost":"0.001"', None, (INVALID_FIELD,)),
    (',"cost":true', None, (INVALID_FIELD,)),
    (',"cost":null', None, ()),
    (',"cost":1e-999999', 0, (PROVIDER_COST_ROUNDED,)),  # Decimal reads it; no float underflow games
    (',"cost":0.' + "1" * 150, None, (INVALID_FIELD,)),  # more digits than any amount: garbage
])
def test_openrouter_cost(tail: str, units: int | None, flags: tuple[str, ...]) -> None:
    u = body("chat", openrouter_chat(tail))
    assert (u.provider_cost_units, u.flags) == (units, flags)
    assert (u.input_tokens, u.output_tokens, u.total_tokens) == (100, 10, 110)  # the counts stand regardless


@pytest.mark.parametrize(("ticks", "units", "flags"), [
    ("1466250", 1_466_250, ()),
    ("1466250.0", 1_466_250, ()),
    ("1466250.5", 1_466_250, (PROVIDER_COST_ROUNDED,)),  # half a tick: half-even
    (str(MAX_PROVIDER_COST_UNITS), MAX_PROVIDER_COST_UNITS, ()),
    (str(MAX_PROVIDER_COST_UNITS + 1), None, (INVALID_FIELD,)),
    ("123456789012345678901234567890", None, (INVALID_FIELD,)),  # orjson reads a float here: the text is read
    ("-5", None, (INVALID_FIELD,)),
])
def test_xai_cost_in_usd_ticks(ticks: str, units: int | None, flags: tuple[str, ...]) -> None:
    data = ('{"id":"x","object":"chat.completion","model":"grok-4","choices":[{"index":0,"message":{"role":'
            '"assistant","content":"ok"}}],"usage":{"prompt_tokens":12,"completion_tokens":1,"total_tokens":13,'
            '"num_sources_used":0,"cost_in_usd_ticks":' + ticks + "}}").encode()
    u = body("chat", data)
    assert (u.provider_cost_units, u.flags) == (units, flags)


def test_the_cost_is_read_from_the_usage_object_it_belongs_to() -> None:
    # Another "usage" key earlier in the body (a tool's metadata) is not the one that was read.
    data = (b'{"id":"gen-2","model":"m","metadata":{"usage":{"cost":9.99}},"choices":[{"index":0,'
            b'"message":{"content":"the text says \\"usage\\":{\\"cost\\":5}"}}],'
            b'"usage":{"prompt_tokens":3,"completion_tokens":1,"cost":0.00000000125}}')
    u = body("chat", data)
    assert (u.provider_cost_units, u.flags) == (12, (PROVIDER_COST_ROUNDED,))


def test_stream_cost_in_the_last_chunk() -> None:
    data = (b': OPENROUTER PROCESSING\n\n'
            b'data: {"id":"gen-3","provider":"Google","model":"google/gemini-2.5-pro","object":'
            b'"chat.completion.chunk","created":1,"choices":[{"index":0,"delta":{"role":"assistant",'
            b'"content":"Hi"},"finish_reason":null}]}\n\n'
            b'data: {"id":"gen-3","provider":"Google","model":"google/gemini-2.5-pro","object":'
            b'"chat.completion.chunk","created":1,"choices":[{"index":0,"delta":{"role":"assistant",'
            b'"content":""},"finish_reason":"stop"}],"usage":{"prompt_tokens":20,"completion_tokens":2,'
            b'"total_tokens":22,"cost":0.0000450000000000000001,"is_byok":true,"cost_details":'
            b'{"upstream_inference_cost":0.00045}}}\n\n'
            b'data: [DONE]\n\n')
    u = stream("chat", data).usage
    # 0.0000450000000000000001 + 0.00045 = 0.0004950000000000000001 USD = 4,950,000.000000000001 units.
    assert u is not None and (u.provider_cost_units, u.flags) == (4_950_000, (PROVIDER_COST_ROUNDED,))


# --- hidden output ------------------------------------------------------------------------------------

GEMINI = (b'{"choices":[{"finish_reason":"stop","index":0,"message":{"content":"4","role":"assistant"}}],'
          b'"created":1747000000,"id":"abc","model":"gemini-2.5-pro","object":"chat.completion",'
          b'"usage":{"completion_tokens":12,"prompt_tokens":35,"total_tokens":109}}')


def test_hidden_output_only_flagged_where_the_upstream_is_not_known_to_bill_it() -> None:
    u = body("chat", GEMINI)
    flagged = settle(u, None, False)
    # 109 - 35 - 12 = 62 tokens unaccounted for: flagged total_mismatch, the categories untouched.
    assert cats(flagged) == cats(u) == (35, 0, 0, 0, 12, None) and flagged.flags == (TOTAL_MISMATCH,)
    billed = settle(u, None, True)
    assert cats(billed) == (35, 0, 0, 0, 74, 62) and billed.flags == (OUTPUT_FROM_TOTAL,)


def test_a_total_that_counts_the_cache_twice_is_not_phantom_output_when_flagged() -> None:
    # Some upstreams add cache reads to total_tokens a second time.
    u = Usage.from_openai({"prompt_tokens": 1000, "completion_tokens": 10, "total_tokens": 1810,
                           "prompt_tokens_details": {"cached_tokens": 800}})
    assert u is not None
    assert settle(u, None, False).output_tokens == 10 and settle(u, None, False).flags == (TOTAL_MISMATCH,)


@pytest.mark.parametrize("total", [None, 47, 40])
def test_a_total_at_or_below_the_categories_changes_nothing(total: int | None) -> None:
    u = Usage.from_openai({"prompt_tokens": 35, "completion_tokens": 12, "total_tokens": total})
    assert u is not None and settle(u, None, True) == u == settle(u, None, False)


def test_hidden_output_keeps_a_reported_reasoning_count() -> None:
    # xAI: completion 26, reasoning 189 reported apart, total 506 = 291 + 26 + 189.
    u = Usage.from_openai({"prompt_tokens": 291, "completion_tokens": 26, "total_tokens": 506,
                           "completion_tokens_details": {"reasoning_tokens": 189}})
    assert u is not None and cats(settle(u, None, True)) == (291, 0, 0, 0, 215, 189)


def test_a_total_alone_is_no_report() -> None:
    assert Usage.from_openai({"total_tokens": 50}) is None
    assert Usage.from_responses({"total_tokens": 50}) is None
