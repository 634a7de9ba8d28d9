"""Each usage dialect of SPEC's table, read from whole response bodies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.usage import INVALID_FIELD, NEGATIVE_CLAMPED, Usage, parse_body

FIXTURES = Path(__file__).parents[1] / "fixtures" / "llama-cpp-0.3.36"


def five(u: Usage | None) -> tuple[int, int, int, int, int | None]:
    assert u is not None
    return u.input_tokens, u.cache_read_tokens, u.cache_write_tokens, u.output_tokens, u.reasoning_tokens


def chat(usage: Any, **extra: Any) -> bytes:
    return json.dumps({"id": "c1", "model": "m", "choices": [{"message": {"content": "hi"}}],
                       "usage": usage, **extra}).encode()


@pytest.mark.parametrize(("usage", "want"), [
    # OpenAI: cached and cache-write tokens are inside prompt_tokens.
    ({"prompt_tokens": 5000, "completion_tokens": 700,
      "prompt_tokens_details": {"cached_tokens": 3000, "cache_write_tokens": 500},
      "completion_tokens_details": {"reasoning_tokens": 300}}, (1500, 3000, 500, 700, 300)),
    # Moonshot: usage.cached_tokens at the top level.
    ({"prompt_tokens": 1200, "completion_tokens": 50, "cached_tokens": 1000}, (200, 1000, 0, 50, None)),
    # ...but prompt_tokens_details wins when both are there.
    ({"prompt_tokens": 1200, "completion_tokens": 50, "cached_tokens": 1000,
      "prompt_tokens_details": {"cached_tokens": 400}}, (800, 400, 0, 50, None)),
    # DeepSeek: hit and miss counts.
    ({"prompt_tokens": 900, "completion_tokens": 40, "prompt_cache_hit_tokens": 600,
      "prompt_cache_miss_tokens": 300, "completion_tokens_details": {"reasoning_tokens": 12}},
     (300, 600, 0, 40, 12)),
    # vLLM: plain counts, details may be null.
    ({"prompt_tokens": 77, "completion_tokens": 9, "total_tokens": 86, "prompt_tokens_details": None},
     (77, 0, 0, 9, None)),
])
def test_openai_family(usage: dict[str, Any], want: tuple[int, ...]) -> None:
    observed, text = parse_body("chat", chat(usage))
    assert five(observed.usage) == want
    assert text == "hi" and observed.model == "m" and observed.upstream_request_id == "c1"


def test_llama_cpp_capture() -> None:
    observed, text = parse_body("chat", (FIXTURES / "nonstream.json").read_bytes())
    assert five(observed.usage) == (36, 0, 0, 11, None)
    assert observed.model == "smollm2" and text.startswith("Hello")


def test_responses_api() -> None:
    body = {"id": "resp_1", "model": "m", "service_tier": "priority", "output": [
        {"type": "message", "content": [{"type": "output_text", "text": "hey"}]}],
        "usage": {"input_tokens": 1000, "input_tokens_details": {"cached_tokens": 800},
                  "output_tokens": 60, "output_tokens_details": {"reasoning_tokens": 20}}}
    observed, text = parse_body("responses", json.dumps(body).encode())
    assert five(observed.usage) == (200, 800, 0, 60, 20)
    assert observed.service_tier == "priority" and text == "hey"


def test_anthropic_messages() -> None:
    body = {"id": "msg_1", "model": "m", "content": [{"type": "text", "text": "yo"}],
            "usage": {"input_tokens": 50, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 200,
                      "output_tokens": 30, "service_tier": "priority", "speed": "fast"}}
    observed, text = parse_body("messages", json.dumps(body).encode())
    assert five(observed.usage) == (50, 1000, 200, 30, None)  # input_tokens already excludes the cache
    assert (observed.service_tier, observed.speed, text) == ("priority", "fast", "yo")


def test_embeddings_are_input_only() -> None:
    body = {"object": "list", "model": "e", "data": [], "usage": {"prompt_tokens": 12, "total_tokens": 12}}
    assert five(parse_body("embeddings", json.dumps(body).encode())[0].usage) == (12, 0, 0, 0, None)


def test_top_level_usage_beats_one_inside_a_choice() -> None:
    inner = {"prompt_tokens": 1, "completion_tokens": 1}
    body = {"choices": [{"message": {"content": "x"}, "usage": inner}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5}}
    assert five(parse_body("chat", json.dumps(body).encode())[0].usage) == (10, 0, 0, 5, None)
    del body["usage"]
    assert five(parse_body("chat", json.dumps(body).encode())[0].usage) == (1, 0, 0, 1, None)


def test_negative_subtraction_is_clamped_and_flagged() -> None:
    u = Usage.from_openai({"prompt_tokens": 10, "completion_tokens": 1,
                           "prompt_tokens_details": {"cached_tokens": 50}})
    assert five(u) == (0, 50, 0, 1, None) and u is not None and NEGATIVE_CLAMPED in u.flags


@pytest.mark.parametrize("bad", ["12", -3, True, 1.5, 10**15, [1], {"a": 1}])
def test_garbage_fields_are_not_usage_and_are_flagged(bad: object) -> None:
    u = Usage.from_openai({"prompt_tokens": 10, "completion_tokens": bad})
    assert u is not None and u.output_tokens == 0 and INVALID_FIELD in u.flags
    assert Usage.from_openai({"completion_tokens": bad}) is None  # nothing valid: no usage at all


@pytest.mark.parametrize("body", [b"", b"{", b"[1,2]", b'"x"', b"\xff\xfe", b'{"usage": "lots"}'])
def test_unreadable_bodies_never_raise(body: bytes) -> None:
    for endpoint in ("chat", "completions", "embeddings", "responses", "messages", "other"):
        observed, _ = parse_body(endpoint, body)
        assert observed.usage is None
