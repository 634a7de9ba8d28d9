"""Request framing on the serving protocol, sans sockets, with h11 as the oracle.

- An upgrade offer (`Connection: Upgrade`, `Upgrade: h2c` or any token) is ignored: the request is
  served as plain HTTP/1.1 with its body, and its body is never read as the next request.
- Pipelining: a request is read only after the previous answer is sent (`max_pipelined_requests`);
  what follows waits, unparsed, with reading paused.
- A request answered before its body was read ends the connection: nothing after it is parsed.
- A whole body does not leave reading paused: a client that leaves is seen.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.server.protocol import ServerLimits
from tests.server.fakes import Conn, Echo, responses, split

CUTS = st.lists(st.integers(min_value=0), max_size=10)
SMUGGLED = b"GET /v1/smuggled HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-victim\r\n\r\n"


def run(test: Any) -> Any:
    return asyncio.run(test())


def statuses(conn: Conn) -> list[int]:
    return [s for s, _, _ in responses(conn.transport.written)]


class Gate:
    """An ASGI app that reads each request's body, then waits for the test to let it answer."""

    def __init__(self, read_body: bool = True, status: int = 200, limits: ServerLimits | None = None) -> None:
        self.read_body, self.status = read_body, status
        self.server_limits = limits or ServerLimits()
        self.paths: list[str] = []
        self.bodies: list[bytes] = []
        self.go = asyncio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.paths.append(scope["path"])
        body = b""
        while self.read_body:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        self.bodies.append(body)
        await self.go.wait()
        await send({"type": "http.response.start", "status": self.status,
                    "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"{}"})


# -- upgrade offers ----------------------------------------------------------------------
UPGRADES = [b"h2c", b"websocket", b"foo/1", b"h2c, websocket"]


@pytest.mark.parametrize("token", UPGRADES)
@settings(max_examples=20, deadline=None)
@given(cuts=CUTS)
def test_an_upgrade_offer_is_ignored_and_the_body_is_the_requests_own(token: bytes, cuts: list[int]) -> None:
    app = Echo()
    request = (b"POST /v1/files HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, keep-alive\r\nUpgrade: " + token
               + b"\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\nContent-Length: %d\r\n\r\n" % len(SMUGGLED) + SMUGGLED)

    async def main() -> None:
        conn = Conn(app)
        await conn.feed(split(request + SMUGGLED, cuts))
        # Two answers: the POST's and the real GET's that followed it; never one for its body.
        assert statuses(conn) == [200, 200]
        assert not conn.transport.closed

    run(main)
    [(headers, body), (_, second_body)] = app.seen
    assert body == SMUGGLED and second_body == b""
    assert (b"upgrade", token) not in headers
    assert (b"connection", b"keep-alive") in headers


@settings(max_examples=30, deadline=None)
@given(cuts=CUTS)
def test_an_upgrade_offer_with_a_chunked_body_is_served_with_that_body(cuts: list[int]) -> None:
    app = Echo()
    body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(SMUGGLED), SMUGGLED)
    request = (b"POST /v1/files HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: h2c\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n" + body)

    async def main() -> None:
        conn = Conn(app)
        await conn.feed(split(request, cuts))
        assert statuses(conn) == [200]

    run(main)
    [(headers, seen)] = app.seen
    assert seen == SMUGGLED
    assert not any(name in (b"upgrade", b"connection") for name, _ in headers)


def test_connect_is_refused_and_the_connection_closed() -> None:
    app = Echo()

    async def main() -> None:
        conn = Conn(app)
        await conn.feed([b"CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\n\r\n" + SMUGGLED])
        assert statuses(conn) == [405] and conn.transport.closed

    run(main)
    assert app.seen == []


# -- h11 as the oracle -------------------------------------------------------------------
TOKEN = st.text("abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12).filter(
    lambda s: s.lower() not in {"content-length", "transfer-encoding", "connection", "upgrade", "expect", "host",
                                "te", "trailer"})
VALUE = st.binary(max_size=20).map(lambda b: bytes(c for c in b if 0x21 <= c <= 0x7e))
BODY = st.binary(max_size=300) | st.just(SMUGGLED) | st.just(b"0\r\n\r\n" + SMUGGLED)


@st.composite
def requests(draw: Any) -> tuple[bytes, tuple[bytes, bytes, bytes]]:
    """One request as h11 writes it (so h11 reads it back), with an upgrade offer now and then."""
    method = draw(st.sampled_from([b"GET", b"POST", b"PUT", b"DELETE"]))
    target = b"/v1/" + draw(st.sampled_from([b"chat/completions", b"files", b"models", b"x?y=1"]))
    headers = [(b"host", b"x")] + [(k.encode(), v) for k, v in draw(st.lists(st.tuples(TOKEN, VALUE), max_size=4))]
    if draw(st.booleans()):
        headers += [(b"connection", b"Upgrade"), (b"upgrade", draw(st.sampled_from(UPGRADES)))]
    body = draw(BODY) if method != b"GET" else b""
    chunked = bool(body) and draw(st.booleans())
    headers.append((b"transfer-encoding", b"chunked") if chunked else (b"content-length", b"%d" % len(body)))
    conn = h11.Connection(h11.CLIENT)
    wire = conn.send(h11.Request(method=method, target=target, headers=headers)) or b""
    if body:
        if chunked:  # pieces of any size, and sometimes trailers
            cut = draw(st.integers(0, len(body)))
            for part in (body[:cut], body[cut:]):
                if part:
                    wire += conn.send(h11.Data(data=part)) or b""
        else:
            wire += conn.send(h11.Data(data=body)) or b""
    trailers = [(b"x-trail", b"1")] if chunked and draw(st.booleans()) else []
    wire += conn.send(h11.EndOfMessage(headers=trailers)) or b""
    return wire, (method, target, body)


def h11_reads(wire: bytes) -> list[tuple[bytes, bytes, bytes]]:
    """The requests h11 reads from `wire`, answering each before the next as a server does."""
    server = h11.Connection(h11.SERVER)
    server.receive_data(wire)
    out: list[tuple[bytes, bytes, bytes]] = []
    current: list[Any] = []
    while True:
        event = server.next_event()
        if event is h11.NEED_DATA or (event is h11.PAUSED and server.their_state is h11.MUST_CLOSE):
            return out
        if event is h11.PAUSED:
            server.send(h11.Response(status_code=200, headers=[(b"content-length", b"0")]))
            server.send(h11.EndOfMessage())
            server.start_next_cycle()
            continue
        if isinstance(event, h11.Request):
            current = [event.method, event.target, b""]
        elif isinstance(event, h11.Data):
            current[2] += event.data
        elif isinstance(event, h11.EndOfMessage):
            out.append((current[0], current[1], current[2]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(requests(), min_size=1, max_size=4), cuts=CUTS)
def test_pipelined_requests_reach_the_app_exactly_as_h11_reads_them(
        batch: list[tuple[bytes, tuple[bytes, bytes, bytes]]], cuts: list[int]) -> None:
    wire = b"".join(w for w, _ in batch)
    expected = h11_reads(wire)
    assert expected == [r for _, r in batch]  # the oracle agrees with what was written
    seen: list[tuple[bytes, bytes, bytes]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        target = scope["raw_path"] + (b"?" + scope["query_string"] if scope["query_string"] else b"")
        seen.append((scope["method"].encode(), target, body))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    async def main() -> None:
        conn = Conn(app)
        for chunk in split(wire, cuts):
            conn.protocol.data_received(chunk)
            await conn.settle()
        for _ in range(len(expected)):  # held requests are released as answers leave
            await conn.settle()
        assert statuses(conn) == [200] * len(expected)

    run(main)
    assert seen == expected


# -- pipelining ---------------------------------------------------------------------------
def test_pipelined_requests_wait_unparsed_until_the_answer_before_them_leaves() -> None:
    app = Gate()
    flood = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n" * 7000  # ~256 KiB in one read

    async def main() -> None:
        conn = Conn(app)
        await conn.feed([flood])
        assert app.paths == ["/v1/models"]  # one request read; the rest held as bytes
        assert not conn.transport.reading
        assert len(conn.protocol.pipeline) == 0
        assert len(conn.protocol._held) == len(flood) - len(flood) // 7000
        conn.protocol.data_received(b"more bytes that arrived before the pause took hold")
        assert len(app.paths) == 1
        app.go.set()
        for _ in range(20):
            await conn.settle()
        assert len(app.paths) > 1 and statuses(conn)[:2] == [200, 200]

    run(main)


def test_max_pipelined_requests_lets_that_many_be_read_ahead() -> None:
    app = Gate(limits=ServerLimits(max_pipelined=3))  # the answers wait

    async def main() -> None:
        conn = Conn(app)
        await conn.feed([b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n" * 10])
        assert len(conn.protocol.pipeline) == 2 and not conn.transport.reading
        assert len(conn.protocol._held) == len(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n") * 7

    run(main)


def test_a_request_past_the_limit_whose_start_cannot_be_told_ends_the_connection_after_the_answers_owed() -> None:
    # A chunk extension on the last chunk defeats the look-ahead: the GET behind it is parsed in the
    # same feed, past the limit. It is not served; the POST is answered with `connection: close`.
    app = Echo()
    request = (b"POST /v1/files HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"2\r\n{}\r\n0;ext=1\r\n\r\n" + SMUGGLED)

    async def main() -> None:
        conn = Conn(app)
        await conn.feed([request])
        [(status, headers, _)] = responses(conn.transport.written)
        assert status == 200 and headers[b"connection"] == b"close"
        assert conn.transport.closed

    run(main)
    assert [body for _, body in app.seen] == [b"{}"]


# -- a request answered before its body was read ------------------------------------------
def test_after_an_answer_to_an_unread_body_nothing_more_is_parsed_and_the_connection_ends() -> None:
    app = Gate(read_body=False, status=401, limits=ServerLimits(linger_s=0.05, linger_bytes=4096))
    app.go.set()
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n"

    async def main() -> None:
        conn = Conn(app)
        await conn.feed([head + b"{"])
        [(status, headers, _)] = responses(conn.transport.written)
        assert status == 401 and headers[b"connection"] == b"close"  # the client opens a new one next
        assert conn.transport.eof  # and sees the end at once
        await conn.feed([SMUGGLED, b"x" * 1000])
        assert app.paths == ["/v1/chat/completions"]  # the "body" was never read as a request
        assert not conn.transport.closed
        await conn.feed([b"x" * 4000])  # past linger_bytes: closed
        assert conn.transport.closed

    run(main)


def test_a_client_that_trickles_an_unread_body_is_closed_after_the_linger() -> None:
    app = Gate(read_body=False, status=401, limits=ServerLimits(linger_s=0.05))
    app.go.set()

    async def main() -> None:
        conn = Conn(app)
        await conn.feed([b"POST /v1/files HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n"])
        assert statuses(conn) == [401]
        assert await conn.wait_closed(timeout=30)

    run(main)


def test_a_body_read_whole_leaves_reading_on_so_a_departure_is_seen() -> None:
    app = Gate()  # reads the body, then waits before answering (a slow upstream)
    body = b"x" * (8 << 20)

    async def main() -> None:
        conn = Conn(app)
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
        for chunk in [head, *split(body, range(0, len(body), 256 * 1024))]:
            await conn.feed([chunk])  # the app takes each read before the next arrives
        assert app.bodies == [body]
        assert conn.transport.reading

    run(main)


# -- Transfer-Encoding ---------------------------------------------------------------------
@pytest.mark.parametrize("encoding", [b"chunked\t", b"chunked \t", b"chunked\x0b"])
def test_chunked_followed_by_a_tab_is_refused(encoding: bytes) -> None:
    app = Echo()

    async def main() -> None:
        conn = Conn(app)
        await conn.feed([b"POST /v1/files HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: " + encoding
                         + b"\r\n\r\n2\r\n{}\r\n0\r\n\r\n"])
        [(status, _, body)] = responses(conn.transport.written)
        assert status in (400, 501) and conn.transport.closed
        if status == 501:
            assert orjson.loads(body)["error"]["code"] == "unsupported_transfer_encoding"

    run(main)
    assert app.seen == []


# -- header fields ---------------------------------------------------------------------------
@settings(max_examples=10, deadline=None)
@given(cuts=CUTS)
def test_more_header_fields_than_the_limit_get_431_however_small(cuts: list[int]) -> None:
    app = Echo()
    many = b"".join(b"a%d: b\r\n" % i for i in range(300))  # 3 KB: far under the byte limit

    async def main() -> None:
        conn = Conn(app)
        await conn.feed(split(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n", cuts))
        assert statuses(conn) == [431] and conn.transport.closed

    run(main)
    assert app.seen == []


def test_trailers_count_towards_the_header_field_limit() -> None:
    app = Echo()
    trailers = b"".join(b"t%d: b\r\n" % i for i in range(250))

    async def main() -> None:
        conn = Conn(app)
        await conn.feed([b"POST /v1/files HTTP/1.1\r\nHost: x\r\n" + b"".join(b"h%d: v\r\n" % i for i in range(10))
                         + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n" + trailers + b"\r\n"])
        assert statuses(conn) == [431] and conn.transport.closed

    run(main)


def test_a_head_of_an_ordinary_size_passes() -> None:
    app = Echo()
    fields = b"".join(b"x-f%d: v\r\n" % i for i in range(200))

    async def main() -> None:
        conn = Conn(app)
        await conn.feed([b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + fields + b"\r\n"])
        assert statuses(conn) == [200]

    run(main)


def test_an_answer_to_a_whole_body_keeps_the_connection() -> None:
    app = Gate(read_body=False, status=401)
    app.go.set()

    async def main() -> None:
        conn = Conn(app)
        await conn.feed([b"POST /v1/files HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}" + SMUGGLED])
        assert statuses(conn) == [401, 401]  # the body had arrived: the next request is read
        assert not conn.transport.closed and b"connection: close" not in conn.transport.written

    run(main)
