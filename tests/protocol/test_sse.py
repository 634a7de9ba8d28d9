"""The SSE reader gives the same events whatever the chunk boundaries (WHATWG event streams)."""

from __future__ import annotations

import itertools
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.sse import SSEReader


def reference(stream: bytes) -> list[tuple[str, str | None, str | None]]:
    """A plain reading of the WHATWG rules on the whole stream at once: (event, data, id) per
    block that ends with a blank line. Blocks without data are kept, as the reader keeps them."""
    text = stream.decode("utf-8", "replace")
    text = text.removeprefix("\ufeff")
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out, event, data, ident, any_line = [], "", None, None, False
    for line in lines[:-1]:  # the last piece has no line ending: not a complete line
        if line == "":
            if any_line:
                out.append((event, None if data is None else "\n".join(data), ident))
            event, data, ident, any_line = "", None, None, False
            continue
        any_line = True
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            event = value
        elif name == "data":
            data = [*(data or []), value]
        elif name == "id" and "\0" not in value:  # WHATWG: an id with NULL is ignored
            ident = value
    return out


def read(chunks: list[bytes]) -> tuple[list[tuple[str, str | None, str | None]], bytes]:
    r = SSEReader()
    blocks = [b for c in chunks for b in r.feed(c)] + r.close()
    complete = [(b.event, b.data, b.id) for b in blocks if b.complete and b.raw.strip(b"\r\n\xef\xbb\xbf")]
    return complete, b"".join(b.raw for b in blocks)


_value = st.text(alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=12)
_line = st.one_of(
    st.builds(lambda v: f"data: {v}", _value), st.builds(lambda v: f"data:{v}", _value),
    st.builds(lambda v: f"event: {v}", _value), st.builds(lambda v: f"id: {v}", _value),
    st.builds(lambda v: f": {v}", _value), st.just("data"), st.just("retry: 3000"),
)
_event = st.lists(_line, min_size=1, max_size=5)


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    eol = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    events = draw(st.lists(_event, min_size=0, max_size=6))
    text = "".join(eol.join(e) + eol + eol for e in events)
    if draw(st.booleans()):
        text += draw(_line)  # an unfinished trailing block
    body = text.encode()
    return (b"\xef\xbb\xbf" + body) if draw(st.booleans()) else body


@st.composite
def splits(draw: st.DrawFn, data: bytes) -> list[bytes]:
    cuts = sorted(draw(st.sets(st.integers(0, len(data)), max_size=12)))
    edges = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_any_chunking_gives_the_same_events_and_bytes(data: st.DataObject) -> None:
    stream = data.draw(streams())
    chunks = data.draw(splits(stream))
    whole_events, whole_raw = read([stream])
    events, raw = read(chunks)
    assert raw == stream == whole_raw  # every byte is in exactly one block
    assert events == whole_events == reference(stream)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_byte_by_byte_including_split_crlf(data: st.DataObject) -> None:
    stream = data.draw(streams())
    assert read([bytes([b]) for b in stream]) == read([stream])


def test_examples() -> None:
    r = SSEReader()
    blocks = r.feed(b'data: {"a":1}\n\n: keep-alive\n\nevent: message_start\ndata: x\ndata: y\nid: 7\n\ndata')
    assert [(b.event, b.data, b.id) for b in blocks] == [("", '{"a":1}', None), ("", None, None),
                                                         ("message_start", "x\ny", "7")]
    assert r.pending == 4
    [tail] = r.close()
    assert tail.complete is False and tail.data == "" and tail.raw == b"data"


def test_real_llama_cpp_capture() -> None:
    stream = (Path(__file__).parents[1] / "fixtures" / "llama-cpp-0.3.36" / "stream.sse").read_bytes()
    events, raw = read([stream[i:i + 7] for i in range(0, len(stream), 7)])
    assert raw == stream and events[-1][1] == "[DONE]"
    assert all(e[1] is not None for e in events) and len(events) > 3
