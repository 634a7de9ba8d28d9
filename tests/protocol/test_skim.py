"""Large bodies are metered without building them whole (proxy/protocol/skim.py): the fields the
meter reads come out as orjson would give them, and a body of millions of tiny values costs
bounded memory. Memory is measured with tracemalloc (no timing)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from proxy.metering.estimate.prompts import READERS, Json, total
from proxy.protocol.answer_body import read_answer
from proxy.protocol.request_body import read_request
from proxy.protocol.skim import MAX_DEPTH, run
from proxy.protocol.usage import read_body
from tests.protocol.test_recordings import endpoint
from tests.shared_data import RECORDINGS, shared_fixture

MIB = 1024 * 1024
USAGE = {"prompt_tokens": 12, "total_tokens": 12}


def peak(fn: Callable[[], Any]) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        got = fn()
        return got, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_two_million_objects_in_an_answer_cost_bounded_memory() -> None:
    # 6 MiB of `{}`: orjson builds two million dicts (over 150 MiB) to find a 40-byte usage.
    body = b'{"object":"list","data":[' + b"{}," * 2_000_000 + b'{}],"model":"text-embedding-3-small","usage":' \
        + orjson.dumps(USAGE) + b"}"
    (observed, _), most = peak(lambda: run(read_answer("embeddings", body)))
    assert observed.usage is not None and observed.usage.input_tokens == 12
    assert observed.model == "text-embedding-3-small"
    assert most < 16 * MIB, f"{most / MIB:.0f} MiB traced"


def test_two_million_objects_in_a_request_cost_bounded_memory() -> None:
    body = b'{"model":"gpt-4o","stream":true,"max_tokens":7,"messages":[' + b"{}," * 2_000_000 \
        + b'{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral","ttl":"1h"}}]}]}'
    (got, most) = peak(lambda: run(read_request(body)))
    fields, skimmed = got
    assert skimmed
    assert (fields["model"], fields["stream"], fields["max_tokens"]) == ("gpt-4o", True, 7)
    assert fields["cache_control"] == {"ttl": "1h"}  # the breakpoint settle() looks for
    assert most < 16 * MIB, f"{most / MIB:.0f} MiB traced"


REQUESTS = [
    {"model": "m", "stream": True, "n": 2, "best_of": 3, "max_completion_tokens": 10, "user": "u",
     "metadata": {"user_id": "x"}, "stream_options": {"include_usage": False}, "service_tier": "flex",
     "messages": [{"role": "user", "content": "hi"}]},
    {"model": "a", "max_tokens": 5, "speed": "fast", "stream_options": None,
     "system": [{"type": "text", "text": "s", "cache_control": {"ttl": "1h"}}], "messages": []},
    {"model": "a", "tools": [{"name": "t", "cache_control": {"ttl": "5m"}}], "metadata": "not an object"},
]


@pytest.mark.parametrize("req", REQUESTS)
def test_a_skimmed_request_has_the_fields_orjson_gives(req: dict[str, Any]) -> None:
    body = orjson.dumps(req)
    whole, skimmed = run(read_request(body)), run(read_request(body, whole_values=0))
    assert whole == (req, False) and skimmed[1]
    for key, value in skimmed[0].items():
        if key != "cache_control":
            assert req[key] == value, key
    for key in ("model", "stream", "n", "best_of", "max_tokens", "max_completion_tokens", "user", "metadata",
                "stream_options", "service_tier", "speed"):
        assert skimmed[0].get(key) == req.get(key), key


def test_a_repeated_key_counts_its_last_value_on_both_paths() -> None:
    body = b'{"model":"a","max_tokens":{"x":1},"model":"b","max_tokens":9}'
    assert run(read_request(body, whole_values=0))[0] == orjson.loads(body)


@pytest.mark.parametrize("body", [b"[1,2]", b'{"a":', b'{"a":1} x', b'{"a":NaN}', b'{"a":"\xff"}',
                                  b'{"a":' + b"[" * MAX_DEPTH + b"]" * MAX_DEPTH + b"}"])
def test_what_orjson_refuses_is_refused_on_both_paths(body: bytes) -> None:
    for limit in (1 << 18, 0):
        with pytest.raises(ValueError):
            run(read_request(body, whole_values=limit))


def test_nesting_orjson_reads_is_read_when_skimmed() -> None:
    body = b'{"model":"m","a":' + b"[" * (MAX_DEPTH - 1) + b"]" * (MAX_DEPTH - 1) + b"}"
    assert run(read_request(body, whole_values=0))[0] == {"model": "m"}


def test_integers_beyond_64_bits_read_as_orjson_reads_them() -> None:
    body = b'{"model":"m","seed":123456789012345678901234567890,"usage":{"prompt_tokens":3,"x":1e300}}'
    fields, _ = run(read_request(body, whole_values=0))
    assert fields == {"model": "m"}
    observed, _ = run(read_answer("embeddings", body, whole_values=0))
    assert observed.usage is not None and observed.usage.input_tokens == 3


def test_every_recorded_answer_is_metered_alike_when_skimmed() -> None:
    """The differential check: each recorded non-streamed answer, parsed whole and skimmed."""
    folder = shared_fixture(RECORDINGS)
    names = sorted(p.name for p in folder.glob("*.json"))
    assert names
    for name in names:
        body = (folder / name).read_bytes()
        whole, whole_text = read_body(endpoint(name), body)
        skimmed, skimmed_text = run(read_answer(endpoint(name), body, whole_values=0))
        assert skimmed == whole, name
        if endpoint(name) != "messages":  # tool_use inputs are rendered whole only
            assert sorted(skimmed_text().split("\n")) == sorted(whole_text().split("\n")), name


def test_an_answer_without_usage_keeps_its_text_when_skimmed() -> None:
    body = orjson.dumps({"model": "m", "choices": [{"message": {"role": "assistant", "content": "hello there",
                                                                 "tool_calls": [{"function": {"name": "f",
                                                                                              "arguments": "{}"}}]}}]})
    observed, text = run(read_answer("chat", body, whole_values=0))
    assert observed.usage is None and observed.model == "m"
    assert text() == read_body("chat", body)[1]() == "hello there\nf\n{}"


class _Probe:
    """A value the JSON encoder renders with str(): it notes how many pauses came before."""

    def __init__(self, pauses: list[int], seen: list[int]) -> None:
        self.pauses, self.seen = pauses, seen

    def __str__(self) -> str:
        self.seen.append(self.pauses[0])
        return "p"


def test_tool_definitions_are_rendered_with_pauses() -> None:
    """A request's tools are counted as their JSON text; rendering 30 MB of them in one call
    held the GIL for seconds. Now the count pauses while the text is rendered."""
    pauses, seen = [0], []
    tools = [{"name": "t", "parameters": {"x": _Probe(pauses, seen)}} for _ in range(20_000)]
    steps = total(READERS["chat"]({"messages": [], "tools": tools}), lambda text: _count(text))
    while True:
        try:
            next(steps)
        except StopIteration:
            break
        pauses[0] += 1
    assert len(seen) == 20_000
    # The most probes rendered with no pause between them: bounded, not all of them.
    most = max(seen.count(k) for k in set(seen))
    assert most < 2_000, most


def _count(text: str) -> Any:
    return len(text)
    yield  # a count that never pauses


def test_a_definition_renders_as_json_dumps_does() -> None:
    import json

    from proxy.metering.estimate.prompts import render
    value = [{"name": "é", "n": [1, 2.5, 1e300, None, True], "s": "a\"b\n\u2028"}]
    assert run(render(Json(value))) == json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
