"""The tap's quick path: chat chunks that can report nothing are kept whole, read only for text.

Checked against the block-by-block reading it replaces: the same bytes out, usage, flags and
text, whether the events come one per chunk (token streaming) or all in one (a burst), with
OpenAI's compact `"usage":null` on every chunk.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.protocol.tap import StreamTap
from tests.protocol.test_tap import five


def events(n: int, with_usage: bool = True) -> list[bytes]:
    def chunk(delta: dict[str, Any], **extra: Any) -> bytes:
        c = {"id": "c1", "model": "kimi-k3.1-pro", "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
             "usage": None, **extra}
        return b"data: " + orjson.dumps(c) + b"\n\n"

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": f"w{i} "}) for i in range(n)]
    if with_usage:
        usage = {"prompt_tokens": 1200, "completion_tokens": n, "cached_tokens": 1000}
        out.append(b"data: " + orjson.dumps({"id": "c1", "choices": [], "usage": usage}) + b"\n\n")
    return [*out, b"data: [DONE]\n\n"]


def feed(chunks: list[bytes], drop: bool) -> tuple[StreamTap, bytes]:
    tap = StreamTap("chat", drop)
    out = b"".join(tap.feed(c) for c in chunks) + tap.finish()
    return tap, out


@pytest.mark.parametrize("drop", [True, False])
@pytest.mark.parametrize("burst", [True, False], ids=["burst", "per-event"])
def test_quick_path_reads_what_block_reading_reads(drop: bool, burst: bool) -> None:
    evs = events(30)
    tap, out = feed([b"".join(evs)] if burst else evs, drop)
    expected = b"".join(evs[:-2] + evs[-1:]) if drop else b"".join(evs)
    assert out == expected  # only the usage-only chunk is removed, and only when asked
    assert five(tap.observed().usage) == (200, 1000, 0, 30, None)
    assert tap.done and tap.content_started and not tap.error_seen
    assert tap.completion_text() == "".join(f"w{i} " for i in range(30))


def test_quick_path_still_estimates_a_stream_cut_before_usage() -> None:
    evs = events(12, with_usage=False)[:-1]  # no usage, no [DONE]: the upstream went away
    tap, out = feed(evs, drop=True)
    assert out == b"".join(evs) and not tap.done and tap.observed().usage is None
    assert tap.completion_text() == "".join(f"w{i} " for i in range(12))


@pytest.mark.parametrize("odd", [b'"error":{"message":"x"}', b'"usage":{"prompt_tokens":1}', b"event: error\n"])
def test_a_chunk_that_may_report_takes_the_block_path(odd: bytes) -> None:
    evs = events(3, with_usage=False)
    if odd.startswith(b"event"):
        evs.insert(2, odd + b'data: {"error":{"message":"x"}}\n\n')
    else:
        evs.insert(2, b'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"z"}}],' + odd + b"}\n\n")
    tap, out = feed(evs, drop=True)
    assert out == b"".join(evs)
    if b"error" in odd:
        assert tap.error_seen
    else:
        assert tap.observed().usage is not None
