"""The serving protocol, sans sockets: bytes fed in any chunking, what it wrote read back.

Head and trailer limits, Transfer-Encoding, the before-send hook (timeouts: test_timers.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.server.protocol import ServerLimits
from tests.server.fakes import Conn, Echo, responses, split

CUTS = st.lists(st.integers(min_value=0), max_size=12)
HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
CHUNKED = (HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
           b"5\r\n{\"a\":\r\n3\r\n 1}\r\n0\r\nX-Trail: 1\r\nAuthorization: Bearer evil\r\n\r\n")
EXPECTED_HEADERS = [(b"host", b"x"), (b"content-type", b"application/json"), (b"transfer-encoding", b"chunked")]


def run(test: Any) -> Any:
    return asyncio.run(test())


def answered(conn: Conn) -> list[tuple[int, dict[bytes, bytes], bytes]]:
    return responses(conn.transport.written)


@settings(max_examples=60, deadline=None)
@given(cuts=CUTS)
def test_a_chunked_request_in_any_chunking_reaches_the_app_whole_and_its_trailers_never_as_headers(
        cuts: list[int]) -> None:
    app = Echo()

    async def main() -> None:
        conn = Conn(app)
        await conn.feed(split(CHUNKED + CHUNKED, cuts))  # two on one connection: nothing carries over
        assert [s for s, _, _ in answered(conn)] == [200, 200]
        assert not conn.transport.closed

    run(main)
    assert app.seen == [(EXPECTED_HEADERS, b'{"a": 1}')] * 2


@settings(max_examples=40, deadline=None)
@given(cuts=CUTS, big=st.integers(1, 60_000))
def test_a_head_under_the_limit_passes_in_any_chunking(cuts: list[int], big: int) -> None:
    app = Echo()
    request = HEAD + b"Cookie: " + b"c" * big + b"\r\nContent-Length: 2\r\n\r\n{}"

    async def main() -> None:
        conn = Conn(app)
        await conn.feed(split(request, cuts))
        assert [s for s, _, _ in answered(conn)] == [200]

    run(main)
    assert app.seen[0][0][2] == (b"cookie", b"c" * big)


@settings(max_examples=30, deadline=None)
@given(cuts=CUTS)
def test_trailers_count_against_the_same_limit_as_the_head(cuts: list[int]) -> None:
    # 40 KiB of head and 30 KiB of trailers: each would pass alone, not together.
    head = HEAD + b"Cookie: " + b"c" * 40_000 + b"\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n"
    trailers = b"".join(b"X-T%d: %s\r\n" % (i, b"t" * 1000) for i in range(30)) + b"\r\n"
    app = Echo()

    async def main() -> None:
        conn = Conn(app)
        await conn.feed(split(head + trailers, cuts))
        [(status, _, body)] = answered(conn)
        assert status == 431 and orjson.loads(body)["error"]["code"] == "request_header_too_large"
        assert conn.transport.closed

    run(main)
    assert app.seen == [] and app.events == ["lost", "disconnect"]  # the app waiting for the body hears it


@pytest.mark.parametrize("piece", [1, 997, 65536])
def test_an_endless_trailer_is_refused_once_past_the_limit(piece: int) -> None:
    """httptools buffers a field until it ends: 150 MB of one trailer, sent slowly, must stop at the limit."""
    app = Echo()
    start = HEAD + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nX-Big: "

    async def main() -> None:
        conn = Conn(app)
        await conn.feed([start])
        sent = 0
        while not conn.transport.closed and sent < 150_000_000:
            conn.protocol.data_received(b"a" * piece)
            sent += piece
            if sent % (piece * 64) == 0:
                await asyncio.sleep(0)
        await conn.settle()
        assert conn.transport.closed and sent <= 65536 + 2 * piece
        [(status, _, _)] = answered(conn)
        assert status == 431

    run(main)
    assert app.seen == []


@pytest.mark.parametrize("piece", [1, 4096])
def test_an_endless_header_is_refused_once_past_the_limit(piece: int) -> None:
    async def main() -> None:
        conn = Conn(Echo())
        await conn.feed([HEAD + b"X-Big: "])
        sent = 0
        while not conn.transport.closed:
            conn.protocol.data_received(b"a" * piece)
            sent += piece
        await conn.settle()
        assert sent <= 65536 + 2 * piece and [s for s, _, _ in answered(conn)] == [431]

    run(main)


@pytest.mark.parametrize("encoding", [b"gzip", b"identity", b"gzip, chunked", b"chunked, gzip", b"deflate",
                                      b"chunked\r\nTransfer-Encoding: chunked", b"chunked\r\nTransfer-Encoding: gzip",
                                      b"chunked;x=1", b"x-chunked"])
@settings(max_examples=15, deadline=None)
@given(cuts=CUTS)
def test_a_transfer_encoding_other_than_chunked_gets_501_and_the_connection_closes(
        encoding: bytes, cuts: list[int]) -> None:
    app = Echo()
    request = HEAD + b"Transfer-Encoding: " + encoding + b"\r\n\r\n2\r\n{}\r\n0\r\n\r\n"

    async def main() -> None:
        conn = Conn(app)
        await conn.feed(split(request + request, cuts))
        [(status, headers, body)] = answered(conn)
        assert status == 501 and headers[b"connection"] == b"close"
        assert orjson.loads(body)["error"] == {
            "message": "only `Transfer-Encoding: chunked` is supported in a request",
            "type": "invalid_request_error", "code": "unsupported_transfer_encoding"}
        assert conn.transport.closed

    run(main)
    assert app.seen == []  # the app never saw the request


@pytest.mark.parametrize("encoding", [b"chunked", b"Chunked", b"CHUNKED", b"chunked  "])
def test_chunked_in_any_case_is_accepted(encoding: bytes) -> None:
    app = Echo()

    async def main() -> None:
        conn = Conn(app)
        await conn.feed([HEAD + b"Transfer-Encoding: " + encoding + b"\r\n\r\n2\r\n{}\r\n0\r\n\r\n"])
        assert [s for s, _, _ in answered(conn)] == [200]

    run(main)
    assert app.seen[0][1] == b"{}"


def test_chunked_with_a_content_length_is_still_a_bad_request() -> None:
    async def main() -> None:
        conn = Conn(Echo())
        await conn.feed([HEAD + b"Transfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n2\r\n{}\r\n0\r\n\r\n"])
        assert [s for s, _, _ in answered(conn)] == [400] and conn.transport.closed

    run(main)


def test_the_apps_before_send_hook_runs_before_any_byte_leaves() -> None:
    order: list[str] = []

    async def main() -> None:
        conn = Conn(Echo(before_send=lambda: order.append(f"hook after {len(conn.transport.sends)} sends")))
        await conn.feed([HEAD + b"Content-Length: 2\r\n\r\n{}"] * 2)
        assert [s for s, _, _ in answered(conn)] == [200, 200]

    run(main)
    assert order == ["hook after 0 sends", "hook after 1 sends"]  # one send per response, each after the hook


def test_an_app_without_limits_or_hook_gets_the_defaults() -> None:
    async def plain(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def main() -> None:
        conn = Conn(plain)
        assert conn.protocol.limits == ServerLimits()
        await conn.feed([HEAD + b"Content-Length: 2\r\n\r\n{}"])
        assert conn.transport.written.startswith(b"HTTP/1.1 204 ")

    run(main)


def test_limits_come_from_settings() -> None:
    from proxy.settings import Settings

    s = Settings(head_timeout_s=1, body_timeout_s=2, idle_timeout_s=3, send_timeout_s=4, max_pipelined_requests=5)
    assert ServerLimits.from_settings(s) == ServerLimits(1, 2, 3, 4, 65536, max_pipelined=5)
