"""The SSE reader gives the same events whatever the chunk boundaries (WHATWG event streams)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.protocol.sse import Block, SSEReader
from tests.shared_data import LLAMA_CPP, shared_fixture

Event = tuple[str, str | None, str | None]  # (event, data, id)


def reference(stream: bytes) -> tuple[list[Event], Event | None]:
    """A plain reading of the WHATWG rules on the whole stream at once.

    Returns the fields of every block ended by a blank line (blocks holding only comments
    are kept, as the reader keeps them; a real client would skip those without data), and
    those of the unterminated trailing block, if any line is there.
    """
    text = stream.decode("utf-8", "replace").removeprefix("\ufeff")
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out: list[Event] = []
    event, data, ident, any_line = "", None, None, False

    def fields() -> Event:
        return event, None if data is None else "\n".join(data), ident

    last = lines.pop()  # the piece after the last line ending
    if last:
        lines.append(last)
    for line in lines:
        if line == "":
            if any_line:
                out.append(fields())
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
    return out, fields() if any_line else None


def fields(b: Block) -> Event:
    return b.event, b.data, b.id


def read(chunks: list[bytes]) -> tuple[list[Event], Event | None, bytes]:
    """Feed the chunks, then close: (complete events, trailing event, all raw bytes)."""
    r = SSEReader()
    blocks = [b for c in chunks for b in r.feed(c)]
    assert all(b.complete for b in blocks)
    # At the end a lone CR, held as maybe half a CRLF, may still complete a block.
    blocks += r.close()
    assert all(b.complete for b in blocks[:-1]) and r.pending == 0
    # A bare blank line (or the BOM alone) is a block of its own for the byte accounting.
    kept = [b for b in blocks if b.raw.strip(b"\r\n\xef\xbb\xbf")]
    complete = [fields(b) for b in kept if b.complete]
    tail = [fields(b) for b in kept if not b.complete]
    raw = b"".join(b.raw for b in blocks)
    return complete, tail[0] if tail else None, raw


_value = st.text(alphabet=st.characters(exclude_characters="\r\n", exclude_categories=["Cs"]), max_size=10)
_line = st.one_of(
    st.builds("data: {}".format, _value), st.builds("data:{}".format, _value),
    st.builds("event: {}".format, _value), st.builds("id: {}".format, _value),
    st.builds(": {}".format, _value), st.builds("{}: {}".format, _value, _value),
    st.sampled_from(["data", "data:", "data:  two", "event", "id", "id: a\0b", "retry: 3000",
                     ": keep-alive", " data: x", ":"]),
)
_eol = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    """Events of 1-5 lines, each line ending LF, CRLF or CR (mixed, as WHATWG allows)."""
    text = ""
    for _ in range(draw(st.integers(0, 6))):
        for line in draw(st.lists(_line, min_size=1, max_size=5)):
            text += line + draw(_eol)
        text += draw(_eol)
    if draw(st.booleans()):  # an unfinished trailing block, maybe ending in a lone CR
        text += draw(_line) + draw(st.sampled_from(["", "\r", "\n", "\r\n"]))
    body = text.encode()
    return (b"\xef\xbb\xbf" + body) if draw(st.booleans()) else body


@st.composite
def splits(draw: st.DrawFn, data: bytes) -> list[bytes]:
    """Any cut points, plus one right after every CR so that CRLFs get split too."""
    cuts = set(draw(st.sets(st.integers(0, len(data)), max_size=12)))
    if draw(st.booleans()):
        cuts |= {i + 1 for i, b in enumerate(data) if b == 13}
    edges = [0, *sorted(cuts), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_any_chunking_gives_the_same_events_and_bytes(data: st.DataObject) -> None:
    stream = data.draw(streams())
    chunks = data.draw(splits(stream))
    whole = read([stream])
    events, tail, raw = read(chunks)
    assert raw == stream == whole[2]  # every byte is in exactly one block
    assert (events, tail) == whole[:2] == reference(stream)


@settings(max_examples=150, deadline=None)
@given(streams())
def test_byte_by_byte(stream: bytes) -> None:
    assert read([bytes([b]) for b in stream]) == read([stream])


def test_several_events_in_one_chunk() -> None:
    r = SSEReader()
    blocks = r.feed(b'data: {"a":1}\n\n: keep-alive\n\nevent: message_start\ndata: x\ndata: y\nid: 7\n\ndata')
    assert [fields(b) for b in blocks] == [("", '{"a":1}', None), ("", None, None), ("message_start", "x\ny", "7")]
    assert [b.raw for b in blocks] == [b'data: {"a":1}\n\n', b": keep-alive\n\n",
                                       b"event: message_start\ndata: x\ndata: y\nid: 7\n\n"]
    assert r.pending == 4


def test_unterminated_trailing_block_at_close() -> None:
    r = SSEReader()
    assert r.feed(b"data: 1\n\nevent: e\ndata: par") == [Block(b"data: 1\n\n", "", "1", None)]
    [tail] = r.close()
    assert tail == Block(b"event: e\ndata: par", "e", "par", None, complete=False)
    assert r.close() == [] and r.pending == 0


def test_field_forms() -> None:
    def one(raw: bytes) -> Event:
        [b] = SSEReader().feed(raw)
        return fields(b)

    assert one(b"data:x\n\n") == ("", "x", None)  # no space after the colon
    assert one(b"data:  x\n\n") == ("", " x", None)  # only one space is removed
    assert one(b"data\n\n") == ("", "", None)  # no colon: the whole line is the name, value ""
    assert one(b"data\ndata\n\n") == ("", "\n", None)
    assert one(b"retry: 3000\n\n") == ("", None, None)  # retry is not an event field
    assert one(b"id: 1\0\n\n") == ("", None, None)  # an id with NULL is ignored
    assert one(b"event: a\nevent: b\ndata: {}\n\n") == ("b", "{}", None)
    assert one(b"\xef\xbb\xbfdata: x\r\n\r\n") == ("", "x", None)  # BOM only at the start
    assert one(b"data: \xff\n\n") == ("", "\ufffd", None)  # bad UTF-8 never raises


def test_crlf_split_between_cr_and_lf() -> None:
    r = SSEReader()
    assert r.feed(b"data: a\r\n\r") == []  # the last CR may still be half of a CRLF
    [b] = r.feed(b"\ndata: b\r")
    assert b.raw == b"data: a\r\n\r\n" and b.data == "a"
    assert [fields(x) for x in r.feed(b"\r")] == []  # CR CR: two line endings, one still in doubt
    [c] = r.feed(b"data: c")  # ...resolved by a byte that is not LF
    assert c.raw == b"data: b\r\r" and c.data == "b"


def test_long_line_in_small_chunks_is_not_rescanned() -> None:
    r = SSEReader()
    for _ in range(20000):
        assert r.feed(b"x" * 100) == []
    [b] = r.feed(b"\n\n")
    assert len(b.raw) == 2_000_002


def test_real_llama_cpp_capture() -> None:
    stream = shared_fixture(LLAMA_CPP / "stream.sse").read_bytes()
    events, tail, raw = read([stream[i:i + 7] for i in range(0, len(stream), 7)])
    assert raw == stream and tail is None and (events, tail) == reference(stream)
    assert events[-1] == ("", "[DONE]", None) and len(events) == 14
    assert all(e[1] is not None and e[1].startswith("{") for e in events[:-1])
