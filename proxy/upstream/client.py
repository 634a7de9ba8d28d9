"""The relay's upstream HTTP/1.1 client: pooled keep-alive connections on asyncio protocols.

Why not a general-purpose client: on the relay's hot path aiohttp's client cost ~150 µs of
CPU per request on this machine against ~40 µs for this one (README "Benchmarks"). It does
only what a relay needs: one request per connection at a time, the response head parsed by
httptools, the body handed on as it arrives (chunked framing removed, content encoding
left alone), read timeouts between reads, and back-pressure when the consumer is slower
than the upstream.

Errors: `Unreachable` (no connection, or it died before any response byte), `Broken`
(the connection failed after the response started) and the builtin `TimeoutError`.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from collections.abc import Iterable
from typing import cast

import httptools

from proxy.errors import Broken, Unreachable

BUFFER_HIGH = 256 * 1024  # body bytes buffered before the upstream socket is paused
_NO_BODY = frozenset({204, 304})
_SAFE_TARGET = re.compile(r"[^\x00-\x20\x7f]+").fullmatch


class Response:
    """One response: its head at once, its body read with `async for chunk in response`."""

    __slots__ = ("_conn", "raw_headers", "status")

    def __init__(self, conn: _Connection) -> None:
        self._conn = conn
        self.status = conn.status
        self.raw_headers: list[tuple[bytes, bytes]] = conn.headers  # names in lower case

    def header(self, name: bytes) -> str | None:
        """The first value of a header, `name` in lower case."""
        for k, v in self.raw_headers:
            if k == name:
                return v.decode("latin-1")
        return None

    @property
    def content_type(self) -> str:
        """The media type alone, lower case (`text/event-stream`)."""
        value = self.header(b"content-type") or ""
        return value.split(";", 1)[0].strip().lower()

    def __aiter__(self) -> Response:
        return self

    async def __anext__(self) -> bytes:
        chunk = await self._conn.read()
        if not chunk:
            raise StopAsyncIteration
        return chunk

    def release(self) -> None:
        """Done with the response: a fully read keep-alive connection goes back to the pool."""
        self._conn.finish()

    def close(self) -> None:
        """Drop the connection (a body not read to its end cannot be reused)."""
        self._conn.drop()


class _Connection(asyncio.Protocol):
    """One upstream connection; carries one exchange at a time."""

    def __init__(self, host: HostPool) -> None:
        self.host = host
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.reused = False
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.keep_alive = False
        self.until_close = False  # no length and not chunked: the body ends when the connection does
        self.started = False  # any response byte arrived
        self.complete = False
        self.exc: BaseException | None = None
        self.head: asyncio.Future[None] | None = None
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._no_body = False

    # --- asyncio.Protocol -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        if self.head is None:  # bytes on an idle connection: nothing asked for them
            self.drop()
            return
        self.started = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            self._fail(Broken(f"malformed response from the upstream: {e}"))
            self.drop()

    def eof_received(self) -> bool | None:
        return None  # let the transport close; connection_lost does the rest

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.host.forget(self)
        if self.until_close and self.status and not self.complete and exc is None:
            self.complete = True
            self._wake()
            return
        if not self.complete:
            why = f"upstream connection lost ({type(exc).__name__})" if exc else "upstream closed the connection"
            self._fail(Broken(why) if self.status else Unreachable(why))

    # --- httptools callbacks ----------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))  # names are case-insensitive; lower once, here

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 200:  # 1xx interim answers: wait for the real one
            self.headers = []
            return
        self.status = status
        self.keep_alive = bool(self.parser.should_keep_alive())
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
    async def exchange(self, data: bytes, head_only: bool, read_timeout: float) -> Response:
        assert self.transport is not None
        self._no_body = head_only
        self.head = self.loop.create_future()
        self.transport.write(data)
        await self._wait(self.head, read_timeout)
        return Response(self)

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
                await self._wait(waiter, self.host.read_timeout)
            finally:
                self._waiter = None

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

    def _fail(self, exc: BaseException) -> None:
        if self.exc is None:
            self.exc = exc
        head = self.head
        if head is not None and not head.done():
            head.set_exception(exc)
        w = self._waiter
        if w is not None and not w.done():
            w.set_exception(exc)

    def finish(self) -> None:
        if self.complete and self.keep_alive and not self.closed and not self._chunks:
            self._reset()
            self.reused = True
            self.host.put(self)
        else:
            self.drop()

    def drop(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.close()
        self.host.forget(self)


def _expire(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError())


class HostPool:
    """Keep-alive connections to one origin (scheme://host:port)."""

    def __init__(self, origin: str, connect_timeout: float, read_timeout: float) -> None:
        scheme, _, hostport = origin.partition("://")
        self.tls = scheme.lower() == "https"
        default = 443 if self.tls else 80
        self.host, self.port = _split_hostport(hostport, default)
        name = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = (name if self.port == default else f"{name}:{self.port}").encode("idna")
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self._ssl: ssl.SSLContext | None = ssl.create_default_context() if self.tls else None
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()

    async def request(self, method: str, target: str, headers: Iterable[tuple[str, str]],
                      body: bytes) -> Response:
        lines = [f"{name}: {value}\r\n" for name, value in headers]
        block = "".join(lines)
        # A CR or LF inside a name, value or the target would let one request smuggle another.
        if block.count("\n") != len(lines) or block.count("\r") != len(lines) or not _SAFE_TARGET(target):
            raise ValueError("header or request target with a line break")
        length = b"content-length: %d\r\n" % len(body) if body or method in ("POST", "PUT", "PATCH") else b""
        data = b"".join((f"{method} {target} HTTP/1.1\r\nhost: ".encode("latin-1"), self.host_header, b"\r\n",
                         block.encode("latin-1"), length, b"\r\n", body))
        head_only = method == "HEAD"
        while True:
            conn = self._take()
            fresh = conn is None
            if conn is None:
                conn = await self._connect()
            try:
                return await conn.exchange(data, head_only, self.read_timeout)
            except Unreachable:
                conn.drop()
                # A reused connection the upstream closed while idle: try once more on a new one.
                if fresh or conn.started:
                    raise
            except BaseException:
                conn.drop()
                raise

    def _take(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                return conn
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(self), self.host, self.port, ssl=self._ssl,
                                       server_hostname=self.host if self.tls else None),
                self.connect_timeout)
        except TimeoutError:
            raise
        except (OSError, ssl.SSLError) as e:
            raise Unreachable(f"cannot connect to {self.host}:{self.port} ({type(e).__name__})") from e
        self._all.add(conn)
        return conn

    def put(self, conn: _Connection) -> None:
        self._idle.append(conn)

    def forget(self, conn: _Connection) -> None:
        self._all.discard(conn)

    def close(self) -> None:
        for conn in list(self._all):
            conn.drop()
        self._idle.clear()


def _split_hostport(hostport: str, default: int) -> tuple[str, int]:
    if hostport.startswith("["):  # [v6]:port
        host, _, rest = hostport[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else default
    host, sep, port = hostport.rpartition(":")
    if sep and port.isdigit():
        return host, int(port)
    return hostport, default


class Client:
    """Pools per origin; `request(method, absolute_url, headers, body)`."""

    def __init__(self, connect_timeout: float, read_timeout: float) -> None:
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self._hosts: dict[str, HostPool] = {}

    async def request(self, method: str, url: str, headers: Iterable[tuple[str, str]], body: bytes) -> Response:
        i = url.find("/", url.find("//") + 2)
        origin, target = (url, "/") if i == -1 else (url[:i], url[i:])
        pool = self._hosts.get(origin)
        if pool is None:
            pool = self._hosts[origin] = HostPool(origin, self.connect_timeout, self.read_timeout)
        return await pool.request(method, target, headers, body)

    def close(self) -> None:
        for pool in self._hosts.values():
            pool.close()
        self._hosts.clear()
