"""Each usage dialect of SPEC's table ("Usage extraction"), read from whole response bodies."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.protocol.tap import StreamTap
from proxy.protocol.usage import INVALID_FIELD, NEGATIVE_CLAMPED, PARTIAL_USAGE, Usage, parse_body
from tests.shared_data import LLAMA_CPP, shared_fixture

Six = tuple[int, int, int, int, int | None, tuple[str, ...]]


def six(u: Usage | None) -> Six:
    """input, cache_read, cache_write, output, reasoning, flags."""
    assert u is not None
    return u.input_tokens, u.cache_read_tokens, u.cache_write_tokens, u.output_tokens, u.reasoning_tokens, u.flags


def chat(usage: Any, **extra: Any) -> bytes:
    return json.dumps({"id": "c1", "model": "m", "choices": [{"message": {"content": "hi"}}],
                       "usage": usage, **extra}).encode()


@pytest.mark.parametrize(("usage", "want"), [
    pytest.param({"prompt_tokens": 5000, "completion_tokens": 700, "total_tokens": 5700,
                  "prompt_tokens_details": {"cached_tokens": 3000, "cache_write_tokens": 500},
                  "completion_tokens_details": {"reasoning_tokens": 300}},
                 (1500, 3000, 500, 700, 300, ()), id="openai: cache read and write are inside prompt_tokens"),
    pytest.param({"prompt_tokens": 1200, "completion_tokens": 50, "cached_tokens": 1000},
                 (200, 1000, 0, 50, None, ()), id="moonshot: top-level cached_tokens"),
    pytest.param({"prompt_tokens": 1200, "completion_tokens": 50, "cached_tokens": 1000,
                  "prompt_tokens_details": {"cached_tokens": 400}},
                 (800, 400, 0, 50, None, ()), id="moonshot: prompt_tokens_details wins"),
    pytest.param({"prompt_tokens": 900, "completion_tokens": 40, "prompt_cache_hit_tokens": 600,
                  "prompt_cache_miss_tokens": 300, "completion_tokens_details": {"reasoning_tokens": 12}},
                 (300, 600, 0, 40, 12, ()), id="deepseek: hit and miss"),
    pytest.param({"prompt_tokens": 900, "completion_tokens": 40, "prompt_cache_hit_tokens": 600,
                  "prompt_cache_miss_tokens": 300, "prompt_tokens_details": {"cached_tokens": 600}},
                 (300, 600, 0, 40, None, ()), id="deepseek: also reporting cached_tokens, not counted twice"),
    pytest.param({"prompt_tokens": 77, "completion_tokens": 9, "total_tokens": 86, "prompt_tokens_details": None},
                 (77, 0, 0, 9, None, ()), id="vllm: plain counts, null details"),
])
def test_openai_family(usage: dict[str, Any], want: Six) -> None:
    observed, text = parse_body("chat", chat(usage))
    assert six(observed.usage) == want
    assert (text, observed.model, observed.upstream_request_id) == ("hi", "m", "c1")


def test_legacy_completions() -> None:
    body = {"id": "cmpl-1", "model": "m", "choices": [{"text": "once upon"}],
            "usage": {"prompt_tokens": 4, "completion_tokens": 2}}
    observed, text = parse_body("completions", json.dumps(body).encode())
    assert six(observed.usage) == (4, 0, 0, 2, None, ()) and text == "once upon"


def test_llama_cpp_real_nonstream_capture() -> None:
    observed, text = parse_body("chat", shared_fixture(LLAMA_CPP / "nonstream.json").read_bytes())
    assert six(observed.usage) == (36, 0, 0, 11, None, ())
    assert observed.model == "smollm2" and text == "Hello, welcome to my little corner of the world!"
    assert observed.upstream_request_id == "chatcmpl-407f7aea-0370-401c-abf3-639a3b2988e7"


def test_llama_cpp_real_stream_capture_reports_no_usage() -> None:
    # llama.cpp ignores stream_options.include_usage: nothing to read, the meter must estimate.
    tap = StreamTap("chat", True)
    data = shared_fixture(LLAMA_CPP / "stream.sse").read_bytes()
    assert tap.feed(data) + tap.finish() == data
    assert tap.done and tap.observed().usage is None and tap.observed().model == "smollm2"
    assert tap.completion_text() == "Hello, welcome to my little corner of the world."


def test_responses_api() -> None:
    body = {"id": "resp_1", "model": "m", "service_tier": "priority", "output": [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
        {"type": "message", "content": [{"type": "output_text", "text": "hey"}]},
        {"type": "function_call", "name": "f", "arguments": "{}"}],
        "usage": {"input_tokens": 1000, "input_tokens_details": {"cached_tokens": 800, "cache_write_tokens": 50},
                  "output_tokens": 60, "output_tokens_details": {"reasoning_tokens": 20}, "total_tokens": 1060}}
    observed, text = parse_body("responses", json.dumps(body).encode())
    assert six(observed.usage) == (150, 800, 50, 60, 20, ())
    assert (observed.service_tier, observed.upstream_request_id) == ("priority", "resp_1")
    assert text.split("\n") == ["think", "hey", "f", "{}"]


def test_anthropic_messages() -> None:
    body = {"id": "msg_1", "model": "claude-x", "content": [{"type": "text", "text": "yo"}],
            "usage": {"input_tokens": 50, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 200,
                      "output_tokens": 30, "service_tier": "priority", "speed": "fast"}}
    observed, text = parse_body("messages", json.dumps(body).encode())
    assert six(observed.usage) == (50, 1000, 200, 30, None, ())  # input_tokens already excludes the cache
    assert (observed.model, observed.service_tier, observed.speed, text) == ("claude-x", "priority", "fast", "yo")


def test_anthropic_cache_write_split_by_ttl() -> None:
    # Only the parts: their sum is the total, the 1-hour part a category of its own.
    u = Usage.from_anthropic({"input_tokens": 5, "output_tokens": 1,
                              "cache_creation": {"ephemeral_5m_input_tokens": 30, "ephemeral_1h_input_tokens": 70}})
    assert u is not None and six(u) == (5, 0, 30, 1, None, ()) and u.cache_write_1h_tokens == 70
    assert u.cache_ttl_reported and u.input_side_tokens == 105


def test_anthropic_tool_input_too_deep_to_write_keeps_the_usage() -> None:
    deep: Any = 1
    for _ in range(300):  # orjson reads 1024 levels but writes only 254
        deep = [deep]
    body = {"content": [{"type": "tool_use", "name": "f", "input": {"a": deep}}],
            "usage": {"input_tokens": 3, "output_tokens": 4}}
    observed, text = parse_body("messages", json.dumps(body).encode())
    assert six(observed.usage) == (3, 0, 0, 4, None, ()) and text == "f"


def test_embeddings_are_input_only() -> None:
    body = {"object": "list", "model": "e", "data": [], "usage": {"prompt_tokens": 12, "total_tokens": 12}}
    assert six(parse_body("embeddings", json.dumps(body).encode())[0].usage) == (12, 0, 0, 0, None, ())


def test_top_level_usage_beats_one_inside_a_choice() -> None:
    inner = {"prompt_tokens": 1, "completion_tokens": 1}
    body: dict[str, Any] = {"choices": [{"message": {"content": "x"}, "usage": inner}],
                            "usage": {"prompt_tokens": 10, "completion_tokens": 5}}
    assert six(parse_body("chat", json.dumps(body).encode())[0].usage) == (10, 0, 0, 5, None, ())
    del body["usage"]  # no top-level report: the one inside the choice is read
    assert six(parse_body("chat", json.dumps(body).encode())[0].usage) == (1, 0, 0, 1, None, ())
    body["usage"] = None
    assert six(parse_body("chat", json.dumps(body).encode())[0].usage) == (1, 0, 0, 1, None, ())


@pytest.mark.parametrize(("u", "want"), [
    (Usage.from_openai({"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 50}}),
     (0, 50, 0, 1, None, (NEGATIVE_CLAMPED,))),
    (Usage.from_openai({"prompt_tokens": 10, "completion_tokens": 1,
                        "prompt_tokens_details": {"cached_tokens": 6, "cache_write_tokens": 6}}),
     (0, 6, 6, 1, None, (NEGATIVE_CLAMPED,))),
    (Usage.from_responses({"input_tokens": 3, "output_tokens": 2, "input_tokens_details": {"cached_tokens": 9}}),
     (0, 9, 0, 2, None, (NEGATIVE_CLAMPED,))),
])
def test_negative_subtraction_is_clamped_and_flagged(u: Usage | None, want: Six) -> None:
    assert six(u) == want


# The rule: a field that is not a non-negative int (up to MAX_TOKENS) is not reported and the usage
# is flagged; with no valid token field at all there is no usage (None), so the meter estimates.
GARBAGE = ["12", -3, True, False, 1.5, 3.0, 10**15, [1], {"a": 1}, "NaN"]


@pytest.mark.parametrize("bad", GARBAGE)
def test_garbage_token_fields(bad: object) -> None:
    assert six(Usage.from_openai({"prompt_tokens": 10, "completion_tokens": bad})) == (
        10, 0, 0, 0, None, (INVALID_FIELD,))
    assert six(Usage.from_openai({"prompt_tokens": bad, "completion_tokens": 4})) == (
        0, 0, 0, 4, None, (INVALID_FIELD, PARTIAL_USAGE))
    assert six(Usage.from_openai({"prompt_tokens": 10, "completion_tokens": 4,
                                  "prompt_tokens_details": {"cached_tokens": bad},
                                  "completion_tokens_details": {"reasoning_tokens": bad}})) == (
        10, 0, 0, 4, None, (INVALID_FIELD,))
    assert six(Usage.from_responses({"input_tokens": 10, "output_tokens": bad})) == (
        10, 0, 0, 0, None, (INVALID_FIELD, PARTIAL_USAGE))
    assert six(Usage.from_anthropic({"input_tokens": 10, "output_tokens": 2, "cache_read_input_tokens": bad})) == (
        10, 0, 0, 2, None, (INVALID_FIELD,))
    for reader in (Usage.from_openai, Usage.from_responses, Usage.from_anthropic):
        assert reader({"prompt_tokens": bad, "input_tokens": bad, "output_tokens": bad}) is None


@pytest.mark.parametrize("usage", [None, "lots", 7, [], {}, {"total_tokens": None}])
def test_usage_that_is_not_a_report(usage: object) -> None:
    for reader in (Usage.from_openai, Usage.from_responses, Usage.from_anthropic):
        assert reader(usage) is None


@pytest.mark.parametrize("body", [b"", b"{", b"[1,2]", b'"x"', b"null", b"\xff\xfe", b'{"usage": "lots"}',
                                  b'{"choices": "x", "content": 3, "output": {}, "usage": [1]}',
                                  b"[" * 2000 + b"]" * 2000])
def test_unreadable_bodies_never_raise(body: bytes) -> None:
    for endpoint in ("chat", "completions", "embeddings", "responses", "messages", "other"):
        observed, text = parse_body(endpoint, body)
        assert observed.usage is None and text == ""


def test_metadata_is_bounded_strings_only() -> None:
    observed, _ = parse_body("chat", chat({"prompt_tokens": 1}, model="x" * 1000, service_tier=5, id=None))
    assert observed.model == "x" * 256 and observed.service_tier is None
