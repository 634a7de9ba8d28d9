"""One upstream HTTP/1.1 connection: an asyncio protocol that carries one exchange at a time.

The response is parsed by httptools (llhttp), with a fresh parser per exchange so no state
leaks from one response into the next, and held to stricter rules than llhttp's own where
a relay must be strict (RFC 9112): no protocol switch nobody asked for, no status outside
100-599, no HTTP version but 1.0 and 1.1, no transfer coding but `chunked`. Anything else
is a `MalformedResponse`. Bytes after a complete response, or on an idle connection, mean
the connection is out of step with the upstream: it is closed, never reused.

Body bytes are handed on as they arrive (chunked framing removed, content coding left
alone); reading pauses when the consumer falls BUFFER_HIGH bytes behind. Tests drive this
class by feeding it bytes, with no socket (tests/upstream/test_connection.py).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import cast

import httptools

from proxy.errors import Broken, MalformedResponse

BUFFER_HIGH = 256 * 1024  # body bytes buffered before the upstream socket is paused
MAX_RESPONSE_HEAD = 256 * 1024  # status line and headers (interim answers too); real ones are < 16 KiB
_NO_BODY = frozenset({204, 304})


class _Stop(Exception):
    """Raised inside a parser callback to stop parsing; the reason is kept on the connection."""


class Connection(asyncio.Protocol):
    """`exchange(request_bytes)` writes a request and waits for the response head; then
    `read()` gives the body, `finish()` hands the connection back or closes it."""

    def __init__(self, on_closed: Callable[[Connection], None], read_timeout: float,
                 explain: Callable[[OSError], BaseException] | None = None) -> None:
        self.on_closed = on_closed
        # Says why a connection failed before any answer (a TLS 1.3 server refuses a client
        # certificate only after the handshake, so it surfaces here, not when connecting).
        self.explain = explain
        self.read_timeout = read_timeout
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.exchanges = 0  # exchanges started on this connection (0: fresh)
        self.keep_alive_hint: float | None = None  # the upstream's `Keep-Alive: timeout=N`
        self.idle_until = 0.0  # loop time after which an idle connection is closed (0: in use)
        self._in_exchange = False
        self.parser = httptools.HttpResponseParser(self)
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.keep_alive = False
        self.until_close = False  # no length and not chunked: the body ends when the connection does
        self.started = False  # a response byte arrived
        self.complete = False
        self.poisoned = False  # bytes came that belong to no request: never reuse
        self.exc: BaseException | None = None
        self.head: asyncio.Future[None] | None = None
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._no_body = False
        self._reason: str | None = None
        self._head_bytes = 0

    # --- asyncio.Protocol -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        if not self._in_exchange or self.complete:
            # Nothing asked for these bytes: the connection no longer matches the upstream's view.
            self.poisoned = True
            self.drop()
            return
        self.started = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._malformed(self._reason or "the upstream switched protocols (101) without being asked")
        except httptools.HttpParserError as e:
            self._malformed(self._reason or f"malformed response from the upstream: {e}")
            return
        if not self.status:  # all of it was head: httptools would buffer an endless field whole
            self._head_bytes += len(data)
            if self._head_bytes > MAX_RESPONSE_HEAD:
                self._malformed(f"the upstream's response head is larger than {MAX_RESPONSE_HEAD} bytes")

    def eof_received(self) -> bool | None:
        return None  # let the transport close; connection_lost does the rest

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.on_closed(self)
        if not self._in_exchange or self.complete:
            return
        if self.until_close and self.status and exc is None:
            self.complete = True
            self._wake()
            return
        if not self.started and isinstance(exc, ssl.SSLError) and self.explain is not None:
            self._fail(self.explain(exc))
            return
        why = f"the upstream connection was lost ({type(exc).__name__})" if exc else \
            "the upstream closed the connection"
        if not self.status:
            why += " before answering"
        self._fail(Broken(why))

    # --- httptools callbacks ----------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.complete:  # a second response in the same bytes: nobody asked for it
            self.poisoned = True
            raise _Stop

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.status:  # after the head: a chunked trailer, which is not relayed
            self.headers.append((name.lower(), value))  # names are case-insensitive; lower once, here

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        problem = _refusal(status, self.parser.get_http_version(), self.headers)
        if problem:
            self._reason = problem
            raise _Stop
        if status < 200:  # 1xx interim answers: wait for the real one
            self.headers = []
            return
        self.status = status
        self.keep_alive = bool(self.parser.should_keep_alive())
        self.keep_alive_hint = _keep_alive_timeout(self.headers)
        if not self._no_body and status not in _NO_BODY:
            framed = any(k in (b"content-length", b"transfer-encoding") for k, _ in self.headers)
            self.until_close = not framed
        head = self.head
        if head is not None and not head.done():
            head.set_result(None)
        if self._no_body:  # a HEAD answer: its length header promises a body that never comes
            self.complete = True
            self.keep_alive = False

    def on_body(self, body: bytes) -> None:
        if self.complete:
            return
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > BUFFER_HIGH and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self.status:
            self.complete = True
            self._wake()

    # --- the exchange -----------------------------------------------------------------
    async def exchange(self, data: bytes, head_only: bool) -> None:
        """Write one request and wait for its response head."""
        assert self.transport is not None and not self._in_exchange
        if self.exchanges and not (self.complete and not self.poisoned):
            # Only a response read whole leaves llhttp in its initial state; otherwise start anew.
            self.parser = httptools.HttpResponseParser(self)
        self._reset()
        self._in_exchange = True
        self.exchanges += 1
        self._no_body = head_only
        self.head = self.loop.create_future()
        self.transport.write(data)
        await self._wait(self.head, self.read_timeout)

    @property
    def at_end(self) -> bool:
        """The whole body has been read (so the chunk just read was the last)."""
        return self.complete and not self._chunks

    async def read(self) -> bytes:
        """Body bytes buffered so far (at least one byte), or b"" at the end."""
        while True:
            chunks = self._chunks
            if chunks:
                self._chunks = []
                self._buffered = 0
                if self._paused and self.transport is not None:
                    self._paused = False
                    self.transport.resume_reading()
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
            if self.complete:
                return b""
            if self.exc is not None:
                raise self.exc
            waiter = self._waiter = self.loop.create_future()
            try:
                await self._wait(waiter, self.read_timeout)
            finally:
                self._waiter = None

    def reusable(self) -> bool:
        return (self.complete and self.keep_alive and not self.closed and not self.poisoned
                and not self._chunks and self.transport is not None and not self.transport.is_closing())

    def finish(self) -> bool:
        """Ends the exchange; True when the connection may carry another one."""
        ok = self._in_exchange and self.reusable()
        self._in_exchange = False
        if not ok:
            self.drop()
        return ok

    def drop(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.close()

    async def _wait(self, fut: asyncio.Future[None], timeout: float) -> None:
        timer = self.loop.call_later(timeout, _expire, fut)
        try:
            await fut
        finally:
            timer.cancel()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _malformed(self, why: str) -> None:
        if self.complete:  # the response was whole; what followed only spoils the connection
            self.poisoned = True
        else:
            self._fail(MalformedResponse(why))
        self.drop()

    def _fail(self, exc: BaseException) -> None:
        if self.exc is None:
            self.exc = exc
        head = self.head
        if head is not None and not head.done():
            head.set_exception(exc)
        w = self._waiter
        if w is not None and not w.done():
            w.set_exception(exc)


def _refusal(status: int, version: str, headers: list[tuple[bytes, bytes]]) -> str | None:
    """Why a response head llhttp accepted is still not relayed, or None."""
    if version not in ("1.1", "1.0"):
        return f"the upstream answered in HTTP/{version}"
    if not 100 <= status <= 599:  # RFC 9110 15: valid status codes are 100-599
        return f"the upstream answered with status {status}"
    if status == 101:
        return "the upstream switched protocols (101) without being asked"
    codings = [v for k, v in headers if k == b"transfer-encoding"]
    if codings and (len(codings) > 1 or codings[0].strip().lower() != b"chunked"):
        # gzip/identity/... framing would leave the body's end to guesswork (RFC 9112 6.1)
        return "the upstream used a transfer coding other than chunked: " + \
            b", ".join(codings).decode("latin-1")[:100]
    return None


def _keep_alive_timeout(headers: list[tuple[bytes, bytes]]) -> float | None:
    for k, v in headers:
        if k == b"keep-alive":
            for part in v.split(b","):
                name, _, value = part.strip().partition(b"=")
                if name.strip().lower() == b"timeout" and value.strip().isdigit():
                    return float(value.strip())
    return None


def _expire(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError())

