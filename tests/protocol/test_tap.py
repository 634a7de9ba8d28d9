"""The stream tap: what it reads from a stream, and the one edit it makes (SPEC "HTTP surface")."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import proxy.protocol.tap
import proxy.protocol.usage
from proxy.protocol.tap import OUTPUT_UNREPORTED, StreamTap
from proxy.protocol.usage import Usage
from tests.shared_data import LLAMA_CPP, shared_fixture


def sse(*events: Any, named: bool = False, eol: str = "\n") -> list[bytes]:
    """One SSE block per event: a str is sent as it is, a dict as JSON."""
    out = []
    for e in events:
        data = e if isinstance(e, str) else json.dumps(e)
        head = f"event: {e['type']}{eol}" if named and isinstance(e, dict) else ""
        out.append(f"{head}data: {data}{eol}{eol}".encode())
    return out


def chunk(delta: dict[str, Any] | None = None, usage: Any = None, finish: str | None = None,
          choices: bool = True, **extra: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"id": "c1", "model": "gpt-x", "object": "chat.completion.chunk",
                         "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}] if choices else []}
    if usage is not None:
        c["usage"] = usage
    c.update(extra)
    return c


def five(u: Usage | None) -> tuple[int, int, int, int, int | None]:
    assert u is not None
    return u.input_tokens, u.cache_read_tokens, u.cache_write_tokens, u.output_tokens, u.reasoning_tokens


USAGE = {"prompt_tokens": 100, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 60},
         "completion_tokens_details": {"reasoning_tokens": 2}}
CHAT = sse(chunk({"role": "assistant", "content": ""}), chunk({"content": "Hel"}),
           chunk({"content": "lo"}), chunk(finish="stop"), chunk(usage=USAGE, choices=False), "[DONE]")
CHAT.insert(1, b": keep-alive\n\n")
USAGE_ONLY = 5  # the index in CHAT of the chunk the proxy asked for and the client did not


def run(events: list[bytes], endpoint: str = "chat", drop: bool = True,
        cuts: list[int] | None = None) -> tuple[StreamTap, bytes]:
    """Feed the stream cut at the given offsets, then finish; the tap and every byte it returned."""
    data = b"".join(events)
    tap = StreamTap(endpoint, drop)
    out = bytearray()
    edges = [0, *sorted({min(c, len(data)) for c in cuts or []}), len(data)]
    for a, b in itertools.pairwise(edges):
        out += tap.feed(data[a:b])
    out += tap.finish()
    return tap, bytes(out)


def without(events: list[bytes], i: int) -> bytes:
    return b"".join(events[:i] + events[i + 1:])


def test_usage_only_chunk_is_removed_and_nothing_else() -> None:
    tap, out = run(CHAT)
    assert out == without(CHAT, USAGE_ONLY)
    assert five(tap.observed().usage) == (40, 60, 0, 7, 2)
    assert tap.done and tap.content_started and not tap.error_seen
    assert tap.completion_text() == "Hello"
    assert (tap.observed().model, tap.observed().upstream_request_id) == ("gpt-x", "c1")


def test_usage_only_chunk_removed_from_a_crlf_stream_cut_everywhere() -> None:
    events = sse(chunk({"content": "a"}), chunk(usage=USAGE, choices=False), "[DONE]", eol="\r\n")
    data = b"".join(events)
    for cut in range(len(data) + 1):
        tap, out = run(events, cuts=[cut])
        assert out == without(events, 1) and five(tap.observed().usage) == (40, 60, 0, 7, 2), cut


def test_without_drop_the_bytes_are_identical_and_each_chunk_is_returned_as_is() -> None:
    tap = StreamTap("chat", False)
    data = b"".join(CHAT)
    pieces = [data[i:i + 13] for i in range(0, len(data), 13)]
    for p in pieces:
        assert tap.feed(p) is p
    assert tap.finish() == b""
    assert five(tap.observed().usage) == (40, 60, 0, 7, 2) and tap.done


def test_block_aligned_chunks_pass_through_uncopied() -> None:
    tap = StreamTap("chat", True)
    for e in CHAT:
        out = tap.feed(e)
        assert out is e or (e is CHAT[USAGE_ONLY] and out == b"")


def test_usage_on_a_chunk_with_choices_is_read_and_never_dropped() -> None:
    events = sse(chunk({"content": "a"}), chunk(finish="stop", usage=USAGE), "[DONE]")
    tap, out = run(events)
    assert out == b"".join(events) and five(tap.observed().usage) == (40, 60, 0, 7, 2)


def test_usage_only_chunk_without_a_choices_list_is_not_dropped() -> None:
    # SPEC drops only events with an empty `choices` list.
    usage_only = chunk(usage=USAGE)
    del usage_only["choices"]
    events = sse(chunk({"content": "a"}), usage_only, "[DONE]")
    tap, out = run(events)
    assert out == b"".join(events) and tap.observed().usage is not None


def test_last_usage_report_wins_never_summed() -> None:
    first = {"prompt_tokens": 100, "completion_tokens": 1}
    events = sse(chunk({"content": "a"}, usage=first), chunk({"content": "b"}, usage={**first, "completion_tokens": 2}),
                 chunk(usage=USAGE, choices=False), "[DONE]")
    assert five(run(events)[0].observed().usage) == (40, 60, 0, 7, 2)
    # A null report later on changes nothing.
    events = sse(chunk({"content": "a"}, usage=first), chunk({"content": "b"}) | {"usage": None}, "[DONE]")
    assert five(run(events)[0].observed().usage) == (100, 0, 0, 1, None)


def test_done_and_content_started() -> None:
    tap = StreamTap("chat", True)
    tap.feed(CHAT[0])  # role only, content ""
    assert not tap.content_started
    tap.feed(sse(chunk({"content": None}))[0])
    assert not tap.content_started and not tap.done
    tap.feed(CHAT[2])
    assert tap.content_started and not tap.done
    tap.feed(b"data: [DONE]\n\n")
    assert tap.done
    for delta in ({"reasoning_content": "hmm"}, {"reasoning": "hmm"}, {"refusal": "no"},
                  {"tool_calls": [{"index": 0, "id": "t", "function": {"name": "f", "arguments": ""}}]},
                  {"function_call": {"name": "f"}}):
        t = StreamTap("chat", True)
        t.feed(sse(chunk(delta))[0])
        assert t.content_started, delta
    t = StreamTap("completions", True)
    t.feed(b'data: {"choices": [{"text": "", "index": 0}]}\n\n')
    assert not t.content_started
    t.feed(b'data: {"choices": [{"text": "once", "index": 0}]}\n\n')
    assert t.content_started and t.completion_text() == "once"


def test_tool_call_and_reasoning_text_is_collected() -> None:
    events = sse(chunk({"role": "assistant"}), chunk({"reasoning_content": "think "}),
                 chunk({"tool_calls": [{"index": 0, "function": {"name": "get", "arguments": "{\"a\""}}]}),
                 chunk({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}), "[DONE]")
    tap, _ = run(events)
    assert tap.completion_text() == 'think get{"a": 1}' and tap.observed().usage is None


def test_openai_null_usage_on_every_chunk_is_not_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """With include_usage, OpenAI sends "usage": null on each chunk: content chunks stay unparsed."""
    parsed: list[str] = []
    real = proxy.protocol.usage.loads

    def counting(data: bytes | str) -> Any:
        parsed.append(str(data))
        return real(data)

    monkeypatch.setattr("proxy.protocol.tap.loads", counting)
    body: list[Any] = [chunk({"role": "assistant", "content": ""}) | {"usage": None}]
    body += [chunk({"content": f"w{i} "}) | {"usage": None} for i in range(50)]
    body += [chunk(finish="stop") | {"usage": None}, chunk(usage=USAGE, choices=False), "[DONE]"]
    events = sse(*body)
    tap = StreamTap("chat", True)
    out = b"".join(tap.feed(e) for e in events) + tap.finish()
    assert out == without(events, len(events) - 2)
    assert five(tap.observed().usage) == (40, 60, 0, 7, 2)
    assert len(parsed) == 3  # role chunk, first content chunk, the usage chunk
    assert tap.completion_text().startswith("w0 w1 ")


def test_error_inside_a_chat_stream() -> None:
    events = sse(chunk({"content": "a"}), {"error": {"message": "overloaded", "type": "server_error"}})
    tap, out = run(events)
    assert tap.error_seen and out == b"".join(events) and not tap.done
    tap, _ = run([b'data: {"choices": [{"delta": {"content": "a"}}]}\n\n',
                  b'data: {"object": "error", "message": "boom"}\n\n'])
    assert tap.error_seen
    tap, _ = run([b'event: error\ndata: {"message": "boom"}\n\n'])
    assert tap.error_seen


def test_stream_cut_mid_event_returns_the_held_bytes() -> None:
    data = b"".join(CHAT[:4])[:-5]  # cut inside the fourth event
    for drop in (True, False):
        tap = StreamTap("chat", drop)
        out = tap.feed(data)
        rest = tap.finish()
        # relay.py sends finish()'s bytes as the last body part: every byte reaches the client once.
        assert out + rest == data
        assert rest == (data[len(b"".join(CHAT[:3])):] if drop else b"")  # only a dropping tap holds bytes
        assert not tap.done and tap.observed().usage is None and tap.observed().model == "gpt-x"
        assert tap.completion_text() == "Hel"


def test_stream_cut_before_the_usage_chunks_blank_line() -> None:
    # The data line is whole, so the usage is read; the block is unfinished, so it is not removed.
    data = without(CHAT, 6)[:-1]
    tap, out = run([data])
    assert out == data and five(tap.observed().usage) == (40, 60, 0, 7, 2) and not tap.done


def test_unreadable_sse_is_given_up_and_relayed_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proxy.protocol.tap, "MAX_PENDING", 64)
    data = b"data: " + b"x" * 200 + b"\n\n" + b"".join(CHAT)
    for drop in (True, False):
        tap, out = run([data], drop=drop, cuts=[30, 100, 250])
        assert out == data and tap.gave_up


def test_responses_stream() -> None:
    usage = {"input_tokens": 500, "input_tokens_details": {"cached_tokens": 100}, "output_tokens": 9,
             "output_tokens_details": {"reasoning_tokens": 4}}
    events = sse({"type": "response.created", "response": {"id": "r1", "model": "m", "usage": None}},
                 {"type": "response.output_item.added", "item": {"type": "message"}},
                 {"type": "response.output_text.delta", "delta": "Hi"},
                 {"type": "response.output_text.delta", "delta": " there"},
                 {"type": "response.completed", "response": {"id": "r1", "model": "m", "service_tier": "flex",
                                                             "usage": usage}},
                 named=True)
    for named in (True, False):  # some servers put the type only in the data
        evs = events if named else [b"\n".join(e.split(b"\n")[1:]) for e in events]
        tap, out = run(evs, "responses", drop=True)
        assert out == b"".join(evs) and tap.done and tap.content_started and not tap.error_seen
        assert five(tap.observed().usage) == (400, 100, 0, 9, 4)
        assert (tap.observed().model, tap.observed().service_tier, tap.observed().upstream_request_id) == (
            "m", "flex", "r1")
        assert tap.completion_text() == "Hi there"
    for terminal in ("response.incomplete", "response.failed"):
        t, _ = run(sse({"type": terminal, "response": {"usage": usage}}, named=True), "responses", drop=False)
        assert t.done and five(t.observed().usage) == (400, 100, 0, 9, 4)
        assert t.error_seen is (terminal == "response.failed")
    t, _ = run(sse({"type": "error", "message": "x"}, named=True), "responses", drop=False)
    assert t.error_seen and not t.done


def test_responses_tool_call_starts_content() -> None:
    tap, _ = run(sse({"type": "response.output_item.added", "item": {"type": "function_call", "name": "f"}},
                     {"type": "response.function_call_arguments.delta", "delta": "{}"}, named=True), "responses")
    assert tap.content_started and tap.completion_text() == "f{}"


ANTH_START = {"type": "message_start", "message": {
    "id": "msg_1", "model": "claude-x", "content": [],
    "usage": {"input_tokens": 20, "cache_read_input_tokens": 300, "cache_creation_input_tokens": 40,
              "output_tokens": 1, "service_tier": "standard", "speed": "fast"}}}


def test_anthropic_stream_input_from_start_output_from_last_delta() -> None:
    events = sse(ANTH_START, {"type": "ping"},
                 {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                 {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Yo"}},
                 {"type": "content_block_stop", "index": 0},
                 {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 5}},
                 {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 12}},
                 {"type": "message_stop"}, named=True)
    tap, out = run(events, "messages", drop=True)
    u = tap.observed().usage
    assert out == b"".join(events) and tap.done and tap.content_started and tap.completion_text() == "Yo"
    assert five(u) == (20, 300, 40, 12, None) and u is not None and u.flags == ()  # the last delta, not 1+5+12
    o = tap.observed()
    assert (o.model, o.upstream_request_id, o.service_tier, o.speed) == ("claude-x", "msg_1", "standard", "fast")


def test_anthropic_delta_with_cumulative_or_placeholder_input() -> None:
    grown = {"type": "message_delta", "usage": {"input_tokens": 25, "cache_read_input_tokens": 300,
                                                "output_tokens": 9}}
    assert five(run(sse(ANTH_START, grown, named=True), "messages")[0].observed().usage) == (25, 300, 40, 9, None)
    zeroed = {"type": "message_delta", "usage": {"input_tokens": 0, "cache_read_input_tokens": 0,
                                                 "output_tokens": 9}}
    assert five(run(sse(ANTH_START, zeroed, named=True), "messages")[0].observed().usage) == (20, 300, 40, 9, None)


def test_anthropic_stream_cut_before_any_delta_is_flagged() -> None:
    tap, _ = run(sse(ANTH_START, {"type": "content_block_delta", "delta": {"text": "a"}}, named=True), "messages")
    u = tap.observed().usage
    assert five(u) == (20, 300, 40, 1, None) and u is not None and OUTPUT_UNREPORTED in u.flags
    assert not tap.done


def test_anthropic_error_event() -> None:
    events = sse(ANTH_START, {"type": "error", "error": {"type": "overloaded_error", "message": "x"}}, named=True)
    tap, out = run(events, "messages")
    assert tap.error_seen and not tap.done and out == b"".join(events)


def test_tool_use_starts_anthropic_content() -> None:
    events = sse({"type": "content_block_start", "index": 0,
                  "content_block": {"type": "tool_use", "id": "t", "name": "get", "input": {}}},
                 {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta",
                                                                       "partial_json": "{\"a\": 1}"}}, named=True)
    tap, _ = run(events, "messages")
    assert tap.content_started and tap.completion_text() == 'get{"a": 1}'


def test_garbage_never_breaks_the_stream() -> None:
    events = [b"data: {not json\n\n", b'data: {"choices": 5, "usage": "x"}\n\n', b"data: []\n\n",
              b'event: message_delta\ndata: {"usage": {"output_tokens": "many"}}\n\n', b"data: \xff\xfe\n\n",
              b'data: {"choices": [{"delta": "x"}], "usage": {"prompt_tokens": -1}}\n\n']
    for endpoint in ("chat", "completions", "responses", "messages", "embeddings", "other"):
        tap, out = run(events, endpoint, cuts=[3, 50, 51])
        assert out == b"".join(events)
        tap.observed()
        tap.completion_text()


def test_real_llama_cpp_stream() -> None:
    data = shared_fixture(LLAMA_CPP / "stream.sse").read_bytes()
    tap, out = run([data])
    assert out == data and tap.done and tap.content_started and tap.observed().usage is None
    assert tap.completion_text() == "Hello, welcome to my little corner of the world."
    assert tap.observed().model == "smollm2"


STREAMS: dict[str, tuple[list[bytes] | None, str, bool]] = {
    "chat-drop": (CHAT, "chat", True),
    "chat-keep": (CHAT, "chat", False),
    "llama": (None, "chat", True),  # the real capture, read (or skipped loudly) when drawn
    "responses": (sse({"type": "response.created", "response": {"id": "r", "model": "m"}},
                      {"type": "response.output_text.delta", "delta": "x"},
                      {"type": "response.completed", "response": {"usage": {"input_tokens": 3, "output_tokens": 1}}},
                      named=True, eol="\r\n"), "responses", False),
    "messages": (sse(ANTH_START, {"type": "content_block_delta", "delta": {"text": "a"}},
                     {"type": "message_delta", "usage": {"output_tokens": 4}}, {"type": "message_stop"},
                     named=True, eol="\r"), "messages", False),
}


def summary(tap: StreamTap, out: bytes) -> tuple[Any, ...]:
    return out, tap.observed(), tap.done, tap.content_started, tap.error_seen, tap.completion_text()


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(STREAMS)), cuts=st.lists(st.integers(0, 4000), max_size=40),
       bytewise=st.booleans())
def test_any_chunking_gives_the_same_bytes_and_usage(name: str, cuts: list[int], bytewise: bool) -> None:
    stream, endpoint, drop = STREAMS[name]
    events = stream if stream is not None else [shared_fixture(LLAMA_CPP / "stream.sse").read_bytes()]
    if bytewise:
        cuts = list(range(len(b"".join(events))))
    whole = summary(*run(events, endpoint, drop))
    assert summary(*run(events, endpoint, drop, cuts)) == whole
    expected = without(events, USAGE_ONLY) if name == "chat-drop" else b"".join(events)
    assert whole[0] == expected
