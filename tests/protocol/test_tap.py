"""The stream tap: what it reads from a stream, and the one edit it makes (SPEC "HTTP surface")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.tap import StreamTap

FIXTURES = Path(__file__).parents[1] / "fixtures" / "llama-cpp-0.3.36"


def sse(*events: Any, named: bool = False) -> list[bytes]:
    out = []
    for e in events:
        if isinstance(e, str):
            out.append(f"data: {e}\n\n".encode())
        elif named:
            out.append(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode())
        else:
            out.append(f"data: {json.dumps(e)}\n\n".encode())
    return out


def chunk(delta: dict[str, Any] | None = None, usage: Any = None, finish: str | None = None,
          choices: bool = True) -> dict[str, Any]:
    c: dict[str, Any] = {"id": "c1", "model": "gpt-x", "object": "chat.completion.chunk",
                         "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}] if choices else []}
    if usage is not None:
        c["usage"] = usage
    return c


USAGE = {"prompt_tokens": 100, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 60}}
CHAT = sse(chunk({"role": "assistant", "content": ""}), chunk({"content": "Hel"}), chunk({"content": "lo"}),
           chunk(finish="stop"), chunk(usage=USAGE, choices=False), "[DONE]")


def run(events: list[bytes], endpoint: str = "chat", drop: bool = True,
        sizes: list[int] | None = None) -> tuple[StreamTap, bytes]:
    data = b"".join(events)
    tap = StreamTap(endpoint, drop)
    out = bytearray()
    pos = 0
    for n in sizes or [len(data)]:
        out += tap.feed(data[pos:pos + n])
        pos += n
    out += tap.feed(data[pos:])
    out += tap.finish()
    return tap, bytes(out)


def test_usage_only_chunk_is_removed_and_nothing_else() -> None:
    tap, out = run(CHAT)
    assert out == b"".join(CHAT[:4] + CHAT[5:])
    u = tap.observed().usage
    assert u is not None and (u.input_tokens, u.cache_read_tokens, u.output_tokens) == (40, 60, 7)
    assert tap.done and tap.completion_text() == "Hello"


def test_without_drop_the_bytes_are_identical() -> None:
    tap, out = run(CHAT, drop=False)
    assert out == b"".join(CHAT) and tap.observed().usage is not None


def test_usage_on_a_chunk_with_choices_is_read_and_kept() -> None:
    events = sse(chunk({"content": "a"}), chunk(finish="stop", usage=USAGE), "[DONE]")
    tap, out = run(events)
    assert out == b"".join(events)
    assert tap.observed().usage is not None and tap.observed().usage.output_tokens == 7  # type: ignore[union-attr]


def test_last_usage_report_wins_never_summed() -> None:
    first = {"prompt_tokens": 100, "completion_tokens": 1}
    events = sse(chunk({"content": "a"}, usage=first), chunk(usage=USAGE, choices=False), "[DONE]")
    u = run(events)[0].observed().usage
    assert u is not None and u.output_tokens == 7 and u.input_tokens == 40


def test_content_starts_at_content_not_at_the_role_chunk() -> None:
    tap = StreamTap("chat", True)
    tap.feed(CHAT[0])
    assert not tap.content_started
    tap.feed(CHAT[1])
    assert tap.content_started
    for delta in ({"reasoning_content": "hmm"}, {"tool_calls": [{"index": 0, "function": {"name": "f"}}]}):
        t = StreamTap("chat", True)
        t.feed(sse(chunk(delta))[0])
        assert t.content_started, delta


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 40), max_size=30))
def test_any_chunking_gives_the_same_bytes_and_usage(sizes: list[int]) -> None:
    tap, out = run(CHAT, sizes=sizes)
    assert out == b"".join(CHAT[:4] + CHAT[5:])
    assert tap.observed().usage == run(CHAT)[0].observed().usage


def test_real_llama_cpp_stream_has_no_usage_but_text() -> None:
    data = (FIXTURES / "stream.sse").read_bytes()
    tap, out = run([data])
    assert out == data and tap.done and tap.observed().usage is None
    assert tap.completion_text().startswith("Hello") and tap.observed().model == "smollm2"


def test_a_cut_stream_returns_every_byte_and_what_was_seen() -> None:
    data = b"".join(CHAT[:3])[:-5]  # cut inside the third event
    tap, out = run([data])
    assert out == data and not tap.done and tap.observed().usage is None
    assert tap.completion_text() == "Hel"


def test_responses_stream() -> None:
    usage = {"input_tokens": 500, "input_tokens_details": {"cached_tokens": 100}, "output_tokens": 9,
             "output_tokens_details": {"reasoning_tokens": 4}}
    events = sse({"type": "response.created", "response": {"id": "r1", "model": "m", "usage": None}},
                 {"type": "response.output_text.delta", "delta": "Hi"},
                 {"type": "response.completed", "response": {"id": "r1", "model": "m", "usage": usage}},
                 named=True)
    tap, out = run(events, "responses", drop=False)
    u = tap.observed().usage
    assert out == b"".join(events) and tap.done and tap.content_started
    assert u is not None
    assert (u.input_tokens, u.cache_read_tokens, u.output_tokens, u.reasoning_tokens) == (400, 100, 9, 4)
    for terminal in ("response.incomplete", "response.failed"):
        t, _ = run(sse({"type": terminal, "response": {"usage": usage}}, named=True), "responses", drop=False)
        assert t.done and t.observed().usage is not None
        assert t.error_seen is (terminal == "response.failed")


def test_anthropic_stream_input_from_start_output_from_last_delta() -> None:
    start = {"type": "message_start", "message": {"id": "msg_1", "model": "claude-x", "usage": {
        "input_tokens": 20, "cache_read_input_tokens": 300, "cache_creation_input_tokens": 40, "output_tokens": 1}}}
    events = sse(start,
                 {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Yo"}},
                 {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 5}},
                 {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 12}},
                 {"type": "message_stop"}, named=True)
    tap, out = run(events, "messages", drop=False)
    u = tap.observed().usage
    assert out == b"".join(events) and tap.done and tap.completion_text() == "Yo"
    assert u is not None and (u.input_tokens, u.cache_read_tokens, u.cache_write_tokens, u.output_tokens) == (
        20, 300, 40, 12)  # cumulative: the last delta, not 1 + 5 + 12
    err, _ = run(sse({"type": "error", "error": {"type": "overloaded_error"}}, named=True), "messages", False)
    assert err.error_seen
