"""The upstream connection fed raw response bytes, no socket: h11 is the oracle.

What h11 (a well-kept sans-io HTTP/1.1 implementation) rejects, the connection rejects as a
`MalformedResponse` (the relay's 502). What h11 accepts, the connection reads with the same
status, headers and body — in any chunking of the bytes — except where llmmeter is
stricter on purpose, each case named in STRICTER and allowed by RFC 9112 to a proxy:
a status outside 100-599, an HTTP version but 1.0/1.1, obs-fold, a repeated
Content-Length, Content-Length beside Transfer-Encoding, a bare LF, a control character in a
field value, a 101 nobody asked for.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import h11
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.errors import Broken, MalformedResponse
from proxy.upstream.connection import MAX_RESPONSE_HEAD, Connection


class FakeTransport:
    """What the connection writes and does to its socket."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False
        self.paused = False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


@dataclass
class Read:
    """What one side made of a response: (status, headers, body) or the error it raised."""

    status: int = 0
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""
    error: str | None = None
    reusable: bool = False


def read_with_llmmeter(pieces: list[bytes], eof: bool = True) -> Read:
    async def go() -> Read:
        closed: list[Connection] = []
        conn = Connection(closed.append, read_timeout=5)
        transport = FakeTransport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        exchange = asyncio.ensure_future(conn.exchange(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n", False))
        await asyncio.sleep(0)
        out = Read()
        i = 0
        try:
            while not exchange.done() and i < len(pieces):
                conn.data_received(pieces[i])
                i += 1
                await asyncio.sleep(0)
            if not exchange.done():
                if eof:
                    conn.connection_lost(None)
                await asyncio.sleep(0)
            await asyncio.wait_for(exchange, 1)
            out.status, out.headers = conn.status, list(conn.headers)
            body = bytearray()
            while True:
                chunk = await _read_or_feed(conn, pieces, i, eof)
                if isinstance(chunk, int):
                    i = chunk
                    continue
                if not chunk:
                    break
                body += chunk
            out.body = bytes(body)
            for rest in pieces[i:]:  # whatever came after the response
                conn.data_received(rest)
            out.reusable = conn.reusable()
        except (MalformedResponse, Broken) as e:
            out.error = type(e).__name__ + ": " + str(e)
        return out

    return asyncio.run(go())


async def _read_or_feed(conn: Connection, pieces: list[bytes], i: int, eof: bool) -> bytes | int:
    """The next body bytes; when none are buffered, feed the next piece (or the EOF) instead."""
    if conn._chunks or conn.complete or conn.exc is not None:
        return await conn.read()
    if i < len(pieces):
        conn.data_received(pieces[i])
        return i + 1
    if eof and not conn.closed:
        conn.connection_lost(None)
        return i
    return await asyncio.wait_for(conn.read(), 1)


def read_with_h11(data: bytes) -> Read:
    c = h11.Connection(h11.CLIENT)
    c.send(h11.Request(method="GET", target="/", headers=[("host", "x")]))
    c.send(h11.EndOfMessage())
    c.receive_data(data)
    c.receive_data(b"")
    out = Read()
    body = bytearray()
    try:
        while True:
            ev = c.next_event()
            if isinstance(ev, h11.InformationalResponse):
                if ev.status_code == 101:
                    return Read(error="h11: switched protocols")
                continue
            if isinstance(ev, h11.Response):
                out.status = ev.status_code
                out.headers = [(k.lower(), v) for k, v in ev.headers.raw_items()]
            elif isinstance(ev, h11.Data):
                body += ev.data
            elif isinstance(ev, h11.EndOfMessage | h11.ConnectionClosed) or ev in (h11.NEED_DATA, h11.PAUSED):
                break
    except h11.RemoteProtocolError as e:
        return Read(error=f"h11: {e}")
    out.body = bytes(body)
    return out


def stricter(data: bytes) -> str | None:
    """Why llmmeter refuses a response h11 takes, or None."""
    head = data.split(b"\r\n\r\n", 1)[0]
    if re.search(rb"(?<!\r)\n", head.split(b"\n\n", 1)[0]):
        return "bare LF"  # RFC 9112 2.2: a recipient MAY accept it
    lines = head.split(b"\r\n")
    version, _, rest = lines[0].partition(b" ")
    if version not in (b"HTTP/1.1", b"HTTP/1.0"):
        return "version"
    if rest[:3].isdigit() and not 100 <= int(rest[:3]) <= 599:
        return "status"
    if rest.startswith(b"101"):
        return "101"
    if any(line[:1] in (b" ", b"\t") for line in lines[1:]):
        return "obs-fold"
    if any(re.search(rb"[\x00-\x08\x0a-\x1f\x7f]", line) for line in lines[1:]):
        return "control character in a field"  # RFC 9110 5.5: field values are VCHAR, SP, HTAB, obs-text
    lengths = sum(1 for line in lines[1:] if line.lower().startswith(b"content-length:"))
    if lengths > 1:
        return "repeated content-length"
    if lengths and any(line.lower().startswith(b"transfer-encoding:") for line in lines[1:]):
        return "content-length and transfer-encoding"  # RFC 9112 6.3: "ought to be handled as an error"
    return None


def _h11_header_value(v: bytes) -> bytes:
    return v.strip(b" \t")


# --- hand-picked responses --------------------------------------------------------------

CASES: dict[str, bytes] = {
    "plain": b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello",
    "chunked": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n3\r\n!!!\r\n0\r\n\r\n",
    "chunked with trailer": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\nx-t: 1\r\n\r\n",
    "until close": b"HTTP/1.1 200 OK\r\n\r\nuntil the end",
    "http/1.0": b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok",
    "no reason": b"HTTP/1.1 429\r\ncontent-length: 2\r\n\r\n{}",
    "interim 100": b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi",
    "204": b"HTTP/1.1 204 No Content\r\n\r\n",
    "304 with length": b"HTTP/1.1 304 Not Modified\r\ncontent-length: 5\r\n\r\n",
    "cl+te": b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "duplicate cl": b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\nhello!",
    "same cl twice": b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 5\r\n\r\nhello",
    "obs-fold": b"HTTP/1.1 200 OK\r\nx-a: a\r\n b\r\ncontent-length: 5\r\n\r\nhello",
    "garbage head": b"HTTX/1.1 200 OK\r\n\r\n",
    "101": b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n",
    "status 799": b"HTTP/1.1 799 Weird\r\ncontent-length: 5\r\n\r\nhello",
    "te identity": b"HTTP/1.1 200 OK\r\ntransfer-encoding: identity\r\n\r\nhello",
    "te gzip, chunked": b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "http/2.0 line": b"HTTP/2.0 200 OK\r\ncontent-length: 0\r\n\r\n",
    "space before colon": b"HTTP/1.1 200 OK\r\nx-a : b\r\ncontent-length: 0\r\n\r\n",
    "bare lf": b"HTTP/1.1 200 OK\nContent-Length: 5\n\nhello",
    "nul in value": b"HTTP/1.1 200 OK\r\nx-a: a\x00b\r\ncontent-length: 0\r\n\r\n",
    "negative length": b"HTTP/1.1 200 OK\r\ncontent-length: -5\r\n\r\nhello",
    "bad chunk size": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
    "truncated body": b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhello",
    "truncated chunked": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n",
    "empty": b"",
}


def agree(data: bytes, pieces: list[bytes]) -> None:
    ours, theirs = read_with_llmmeter(pieces), read_with_h11(data)
    why = stricter(data)
    if theirs.error is not None or why is not None:
        assert ours.error is not None, (data, theirs, why, ours)
        return
    assert ours.error is None, (data, ours)
    assert ours.status == theirs.status, data
    assert [(k, _h11_header_value(v)) for k, v in ours.headers] == theirs.headers, data
    assert ours.body == theirs.body, data


@pytest.mark.parametrize("name", list(CASES))
def test_agrees_with_h11_whole_and_byte_by_byte(name: str) -> None:
    data = CASES[name]
    agree(data, [data])
    agree(data, [data[i:i + 1] for i in range(len(data))])


def test_the_stricter_cases_are_refused_with_a_reason() -> None:
    for name in ("obs-fold", "101", "status 799", "te identity", "http/2.0 line", "cl+te", "duplicate cl",
                 "same cl twice", "garbage head", "te gzip, chunked"):
        read = read_with_llmmeter([CASES[name]])
        assert read.error is not None and read.error.startswith("MalformedResponse"), (name, read)
    assert "101" in (read_with_llmmeter([CASES["101"]]).error or "")
    assert "799" in (read_with_llmmeter([CASES["status 799"]]).error or "")
    assert "identity" in (read_with_llmmeter([CASES["te identity"]]).error or "")


def test_a_trailer_never_becomes_a_header() -> None:
    read = read_with_llmmeter([CASES["chunked with trailer"]])
    assert read.body == b"hi" and b"x-t" not in dict(read.headers)


def test_cut_bodies_are_broken_not_short() -> None:
    for name in ("truncated body", "truncated chunked"):
        read = read_with_llmmeter([CASES[name]])
        assert read.error is not None and read.error.startswith("Broken"), (name, read)


# --- reuse: no poisoned connections ----------------------------------------------------

def test_a_response_read_whole_leaves_the_connection_reusable() -> None:
    assert read_with_llmmeter([CASES["plain"]], eof=False).reusable
    assert read_with_llmmeter([CASES["chunked"]], eof=False).reusable
    assert read_with_llmmeter([b"HTTP/1.1 429 Too Many\r\ncontent-length: 2\r\n\r\n{}"], eof=False).reusable


@pytest.mark.parametrize("extra", [
    b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nx",  # a second response nobody asked for
    b"garbage",
    b"\r\n",
])
def test_bytes_after_a_complete_response_close_the_connection(extra: bytes) -> None:
    # In the same read, llhttp itself skips empty lines between messages (RFC 9112 2.2) and
    # stays in its initial state; anything else after the response, or anything at all in a
    # later read, means the connection is out of step.
    together = [[CASES["plain"] + extra]] if extra != b"\r\n" else []
    for pieces in [*together, [CASES["plain"], extra]]:
        read = read_with_llmmeter(pieces, eof=False)
        assert read.error is None and read.body == b"hello"  # the response itself was whole
        assert not read.reusable, pieces


def test_bytes_on_an_idle_connection_close_it() -> None:
    async def go() -> tuple[bool, bool]:
        conn = Connection(lambda c: None, read_timeout=5)
        transport = FakeTransport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        conn.data_received(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
        return conn.reusable(), transport.closed

    assert asyncio.run(go()) == (False, True)


def test_a_slow_consumer_pauses_the_upstream() -> None:
    async def go() -> list[bool]:
        conn = Connection(lambda c: None, read_timeout=5)
        transport = FakeTransport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        ex = asyncio.ensure_future(conn.exchange(b"GET / HTTP/1.1\r\n\r\n", False))
        await asyncio.sleep(0)
        conn.data_received(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        await ex
        seen = []
        for _ in range(5):
            conn.data_received(b"10000\r\n" + b"x" * 0x10000 + b"\r\n")
        seen.append(transport.paused)
        await conn.read()
        seen.append(transport.paused)
        return seen

    assert asyncio.run(go()) == [True, False]


# --- generated responses ----------------------------------------------------------------

TOKEN = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=8).filter(
    lambda s: s not in ("content-length", "transfer-encoding", "connection"))
VALUE = st.binary(min_size=0, max_size=12).map(lambda b: bytes(c for c in b if c not in b"\r\n"))


@st.composite
def responses(draw: Callable[..., Any]) -> bytes:
    version = draw(st.sampled_from([b"HTTP/1.1", b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.1x"]))
    status = draw(st.sampled_from([200, 201, 204, 304, 400, 404, 429, 500, 503, 101, 599, 600, 799, 42]))
    body = draw(st.binary(max_size=40))
    framing = draw(st.sampled_from(["length", "length", "chunked", "chunked", "close", "both", "twice",
                                    "wrong length", "identity", "bad chunk"]))
    headers: list[bytes] = [draw(TOKEN).encode() + b": " + draw(VALUE)
                            for _ in range(draw(st.integers(0, 3)))]
    if draw(st.booleans()):
        headers.insert(draw(st.integers(0, len(headers))), b" folded")
    payload = body
    if framing in ("length", "both", "twice"):
        headers.append(b"content-length: %d" % len(body))
    if framing == "twice":
        headers.append(b"content-length: %d" % len(body))
    if framing == "wrong length":
        headers.append(b"content-length: %d" % (len(body) + draw(st.integers(-3, 3))))
    if framing in ("chunked", "both", "bad chunk"):
        headers.append(b"transfer-encoding: chunked")
        size = b"%x" % len(body) if framing != "bad chunk" else b"g"
        payload = (size + b"\r\n" + body + b"\r\n" if body else b"") + b"0\r\n\r\n"
    if framing == "identity":
        headers.append(b"transfer-encoding: identity")
    head = version + b" %d Reason\r\n" % status + b"".join(h + b"\r\n" for h in headers) + b"\r\n"
    return head + payload


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=responses(), cuts=st.lists(st.integers(0, 400), max_size=6))
def test_agrees_with_h11_on_generated_responses(data: bytes, cuts: list[int]) -> None:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True) if data[a:b]]
    agree(data, pieces or [data])


def test_an_endless_response_head_is_refused_not_buffered() -> None:
    field = b"x-big: " + b"a" * 65536
    pieces = [b"HTTP/1.1 200 OK\r\n"] + [field] * (MAX_RESPONSE_HEAD // len(field) + 2)
    read = read_with_llmmeter(pieces, eof=False)
    assert read.error is not None and "larger than" in read.error
    # A large but bounded head is read as usual.
    ok = b"HTTP/1.1 200 OK\r\n" + b"x-big: " + b"a" * 100_000 + b"\r\ncontent-length: 2\r\n\r\nhi"
    assert read_with_llmmeter([ok[i:i + 4096] for i in range(0, len(ok), 4096)]).body == b"hi"
