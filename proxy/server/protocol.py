"""The one HTTP/1.1 protocol llmmeter serves with: uvicorn's httptools protocol, bounded.

- Head and trailers. httptools takes a request line and header fields of any size, and
  uvicorn keeps each field as a Python object (200,000 small headers took ~1 GB). Past
  `max_head_bytes` (request line, headers and chunked trailers together, or that many raw
  bytes with no field or body byte finished) the client gets 431 and the connection closes.
  Trailers are counted, then dropped: uvicorn would append them to the headers the app holds.
- Transfer-Encoding: anything but exactly `chunked` gets 501 (llhttp alone answers 400, or
  reads `gzip, chunked` as chunked).
- Timeouts (SPEC "Data plane limits"): the head, the gaps in a body, an idle keep-alive
  connection, a client that reads nothing. Timers are armed when the state changes and check
  a stored time when they fire, never per chunk.
- Coalesced writes (proxy/server/coalesce.py), with the app's before-send hook.
- A disconnect callback, scope["extensions"][DISCONNECT]: ASGI tells an app that its client
  left only through `receive()`, so an app must keep a task waiting in it; on Python 3.11
  that task and its wait cost three getpid() syscalls per request. Instead the extension
  takes a callable (or None), called once if the connection is lost while it is set (at
  once if it already was).

The limits and the hook come from the app served (`LLMMeter.server_limits`, `.before_send`):
uvicorn names the protocol class, so nothing can be passed to it but its config.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, cast

import httptools
import orjson
from uvicorn.config import Config
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from proxy.server import DISCONNECT
from proxy.server.coalesce import CoalescingTransport

if TYPE_CHECKING:
    from proxy.settings import Settings

__all__ = ["DISCONNECT", "RelayProtocol", "ServerLimits"]

# Where the connection is in reading a request. The last three read no more requests (see data_received).
_WAITING, _HEAD, _BODY, _LINGER, _STOPPED, _CLOSED = range(6)
_MAX_GUESSES = 8  # where a request ends, guessed ahead (_segment): no more often per request


@dataclass(frozen=True, slots=True)
class ServerLimits:
    head_timeout_s: float = 30.0
    body_timeout_s: float = 60.0
    idle_timeout_s: float = 75.0
    send_timeout_s: float = 120.0
    max_head_bytes: int = 65536  # SDKs send ~1 KiB of head, browsers' cookies stay under 16 KiB
    # SDKs send ~15 fields. Each costs the parser a Python call: 7,000 tiny fields in 35 KB were
    # 10 ms of parsing a head, so twenty keyless clients stalled everyone else.
    max_header_fields: int = 256  # request fields and chunked trailers together
    max_pipelined: int = 1  # requests a connection may have unanswered (SPEC: max_pipelined_requests)
    linger_s: float = 2.0  # after an answer to a request whose body was not read: discard for this long
    linger_bytes: int = 1 << 20  # ...or this many bytes, then close

    @classmethod
    def from_settings(cls, settings: Settings) -> ServerLimits:
        return cls(head_timeout_s=settings.head_timeout_s, body_timeout_s=settings.body_timeout_s,
                   idle_timeout_s=settings.idle_timeout_s, send_timeout_s=settings.send_timeout_s,
                   max_pipelined=settings.max_pipelined_requests)


class _Refused(Exception):
    """Raised in a parser callback once the client was answered: the parser stops there."""


class _Stop(Exception):
    """Raised in a parser callback when a request begins past the pipeline limit in bytes the parser
    already holds: it stops there, the answers owed are sent, then the connection closes."""


def _nothing() -> None:
    pass


def _from_app(app: object) -> tuple[ServerLimits, Callable[[], None]]:
    """The served app's limits and hook; uvicorn's middleware keeps the app it wraps as `.app`."""
    for _ in range(4):
        limits, hook = getattr(app, "server_limits", None), getattr(app, "before_send", None)
        if limits is not None or hook is not None:
            return (limits if isinstance(limits, ServerLimits) else ServerLimits(),
                    cast(Callable[[], None], hook) if callable(hook) else _nothing)
        app = getattr(app, "app", None)
    return ServerLimits(), _nothing


def _error(status: int, code: str, message: str) -> bytes:
    body = orjson.dumps({"error": {"message": message, "type": "invalid_request_error", "code": code}})
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
            % (status, HTTPStatus(status).phrase.encode(), len(body))) + body


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The body's length when one plain Content-Length frames it, else None (chunked, none, odd)."""
    found = None
    for name, value in headers:
        if name == b"content-length":
            if found is not None or not value.isdigit():
                return None
            found = int(value)
        elif name == b"transfer-encoding":
            return None
    return found


def _without_upgrade(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The fields of a request whose upgrade offer is ignored: no Upgrade, no `upgrade` connection option."""
    out = []
    for name, value in headers:
        if name == b"upgrade":
            continue
        if name == b"connection":
            options = [t.strip() for t in value.split(b",") if t.strip() and t.strip().lower() != b"upgrade"]
            if not options:
                continue
            value = b", ".join(options)
        out.append((name, value))
    return out


class _Flow(FlowControl):
    """uvicorn's flow control, except that reading stays paused while the protocol holds bytes back
    (uvicorn resumes reading whenever the app asks for body and whenever an answer ends)."""

    def __init__(self, transport: asyncio.Transport, may_read: Callable[[], bool]) -> None:
        super().__init__(transport)
        self._may_read = may_read

    def resume_reading(self) -> None:
        if self._may_read():
            super().resume_reading()


class RelayProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with llmmeter's limits, timeouts, coalesced writes and
    disconnect callback (see the module's docstring)."""

    def __init__(self, config: Config, server_state: ServerState, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits, self._before_send = _from_app(self.app)
        # uvicorn's keep-alive timer is the idle timeout (typed int there; call_later takes a float).
        self.timeout_keep_alive = self.limits.idle_timeout_s  # type: ignore[assignment]
        self._lenient(self.parser)
        self._phase = _HEAD
        self._head_start = self._body_seen = 0.0
        self._head_bytes = 0  # request line and fields (trailers too) parsed so far, exactly
        self._fields = 0  # header and trailer fields parsed so far
        self._unparsed = 0  # raw bytes received since a field, the head or a body byte was last finished
        self._moved = False  # the parser finished something in the chunk being fed
        self._te: bytes | None = None
        self._tail = b""  # the last bytes fed of a head or a chunked body: its end may straddle two reads
        self._body_left: int | None = None  # body bytes still due under a plain Content-Length
        self._held = b""  # bytes received after a request while its answer (or the pipeline) is pending
        self._offer: tuple[bytes, str] | None = None  # method and version of a head whose upgrade is ignored
        self._lingered = 0
        self._closing: Any = None  # the request whose answer said `connection: close`
        self._guesses = 0  # ends guessed for the request being read
        self._trailers = False  # a chunked body's last chunk was probably seen
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._send_timer: asyncio.TimerHandle | None = None
        self._linger_timer: asyncio.TimerHandle | None = None
        self._send_backlog = 0
        self._on_lost: Callable[[], None] | None = None
        self._lost = False

    @staticmethod
    def _lenient(parser: httptools.HttpRequestParser) -> None:
        # Every Transfer-Encoding but `chunked` is refused in on_headers_complete, with 501.
        parser.set_dangerous_leniencies(lenient_data_after_close=True, lenient_transfer_encoding=True)

    # -- the connection --------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        wrapped: Any = CoalescingTransport(cast(asyncio.Transport, transport), self.loop, self._before_send)
        super().connection_made(wrapped)
        self.flow = _Flow(wrapped, self._may_read)
        self._head_start = self.loop.time()  # a first head is due from the connection's opening
        self._head_timer = self.loop.call_at(self._head_start + self.limits.head_timeout_s, self._head_expired)

    def connection_lost(self, exc: Exception | None) -> None:
        self._phase = _CLOSED
        self._held = b""
        for timer in (self._head_timer, self._body_timer, self._send_timer, self._linger_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = self._send_timer = self._linger_timer = None
        super().connection_lost(exc)
        self._lost = True
        callback, self._on_lost = self._on_lost, None
        if callback is not None:
            callback()

    def _may_read(self) -> bool:
        return not self._held and self._phase < _STOPPED

    def _owed(self) -> int:
        """Requests read whose answers are not sent yet (uvicorn's `cycle` is the last one read)."""
        cycle = self.cycle
        return (cycle is not None and not cycle.response_complete) + len(self.pipeline)

    def data_received(self, data: bytes) -> None:
        phase = self._phase
        if phase >= _LINGER:  # nothing more is parsed on this connection
            if phase == _LINGER:
                self._lingered += len(data)
                if self._lingered > self.limits.linger_bytes:
                    self.transport.close()
            return
        self._unset_keepalive_if_required()
        if self._held:  # reading is paused: what still arrives waits behind what is held
            self._held += data
            return
        self._feed(data)

    def _feed(self, data: bytes) -> None:
        """Parse `data` request by request: what follows a request while `max_pipelined` answers are
        owed is held, unparsed, and reading pauses until an answer leaves (the client's further bytes
        wait in the kernel). The parser is fed up to a head's blank line or a body's declared end, so
        it never runs past a request whose answer is pending; where that end cannot be told ahead (a
        chunked body), a request that begins past the limit stops parsing (on_message_begin)."""
        while data:
            phase = self._phase
            if phase == _WAITING:
                if self._owed() >= self.limits.max_pipelined:
                    self._held = data
                    self.flow.pause_reading()
                    return
                self._phase, self._head_start = _HEAD, self.loop.time()  # the next head's first byte
            elif phase == _BODY:
                self._body_seen = self.loop.time()  # uvloop's cached loop time: no syscall
            elif phase != _HEAD:
                return
            n = self._segment(data)
            piece = data if n >= len(data) else data[:n]
            self._moved = False
            try:
                self.parser.feed_data(piece)
            except httptools.HttpParserUpgrade as offer:
                data = self._ignore_upgrade(piece[offer.args[0]:]) + data[n:]
                continue
            except httptools.HttpParserError:
                if self._phase < _STOPPED:  # else a callback stopped the parser, or answered (431, 501)
                    self._phase = _CLOSED
                    self.logger.warning("Invalid HTTP request received.")
                    self.send_400_response("Invalid HTTP request received.")
                return
            if self._phase == _HEAD:
                self._tail = (self._tail + piece[-3:])[-3:]
                self._still_reading(len(piece))
            elif self._phase == _BODY:
                if self._te is not None:
                    self._tail = (self._tail + piece[-6:])[-6:]
                    if piece is not data:  # the guessed end was early: that was no last chunk
                        self._trailers = False
                self._still_reading(len(piece))
            else:
                self._tail = b""
            data = data[n:]

    def _segment(self, data: bytes) -> int:
        """How much of `data` belongs to the request being read, as far as that can be told ahead:
        a head ends at its first blank line, a body at its Content-Length, a chunked body usually at
        its last chunk's blank line. A guess that is early only splits a feed (a few times per
        request at most); one that is late is caught in on_message_begin."""
        if self._phase == _BODY:
            left = self._body_left
            if left is not None:
                return left if 0 < left < len(data) else len(data)
            if self._te is None or self._guesses > _MAX_GUESSES:
                return len(data)
            buf, start = self._tail + data, 0
            if not self._trailers:
                i = buf.find(b"\r\n0\r\n")  # the last chunk (no extension); trailers may follow
                if i < 0:
                    return len(data)
                self._trailers, start = True, i + 3
            j = buf.find(b"\r\n\r\n", start)
        else:
            if self._guesses > _MAX_GUESSES:
                return len(data)
            buf = self._tail + data[:3] if self._tail else data
            j = buf.find(b"\r\n\r\n")
            if j < 0 and buf is not data:
                buf, j = data, data.find(b"\r\n\r\n")
        if j < 0:
            return len(data)
        self._guesses += 1
        return j + 4 - (len(self._tail) if buf is not data else 0)

    def _ignore_upgrade(self, rest: bytes) -> bytes:
        """The request whose upgrade offer the parser stopped at, written again without the offer, and
        the bytes after its head: a fresh parser reads it as plain HTTP/1.1, its body framed by its own
        Content-Length or chunked coding (RFC 9110 §7.8 lets a server ignore an upgrade). The parser on
        its own would take the body for no body, and parse it as the next request."""
        if self._offer is None:  # never without a head (on_headers_complete); refuse rather than guess
            self._refuse(400, "invalid_request", "invalid upgrade request")
            return b""
        (method, version), self._offer, self._tail = self._offer, None, b""
        self.parser = httptools.HttpRequestParser(self)
        self._lenient(self.parser)
        head = [b"%s %s HTTP/%s\r\n" % (method, self.url, version.encode())]
        head += [name + b": " + value + b"\r\n" for name, value in _without_upgrade(self.headers)]
        return b"".join(head) + b"\r\n" + rest

    def _still_reading(self, n: int) -> None:
        # httptools buffers a field until it ends: count raw bytes so an endless one stays bounded.
        if self._moved:
            self._unparsed = 0
        else:
            self._unparsed += n
            if self._unparsed > self.limits.max_head_bytes:
                self._refuse(431, "request_header_too_large", "request line, headers and trailers exceed "
                             f"{self.limits.max_head_bytes} bytes")
                return
        if self._phase == _HEAD:
            if self._head_timer is None:
                self._head_timer = self.loop.call_at(self._head_start + self.limits.head_timeout_s,
                                                     self._head_expired)
        elif self._body_timer is None:
            self._body_timer = self.loop.call_at(self._body_seen + self.limits.body_timeout_s, self._body_expired)

    # -- parser callbacks ------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self._owed() >= self.limits.max_pipelined:
            # Behind a chunked body, in the same read: where this request began is not known, so it
            # cannot be held back. The answers owed are sent, and the client retries the rest on a
            # new connection (RFC 9112 §9.3.2).
            self._phase = _STOPPED
            self.flow.pause_reading()
            if self.cycle is not None and not self.cycle.response_started:
                self.cycle.keep_alive = False
            raise _Stop
        super().on_message_begin()
        extensions: Any = {DISCONNECT: self._watch}
        self.scope["extensions"] = extensions
        self._head_bytes, self._te, self._body_left, self._guesses, self._trailers = 0, None, None, 0, False
        self._fields = 0
        if self._phase != _HEAD:  # pipelined: it began in the chunk that ended the previous request
            self._phase, self._head_start = _HEAD, self.loop.time()

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        self._moved = True
        self._fields += 1
        if self._fields > self.limits.max_header_fields:
            self._refuse(431, "request_header_too_large",
                         f"more than {self.limits.max_header_fields} header and trailer fields")
            raise _Refused
        if self._phase != _HEAD:
            return  # a chunked body's trailer: never a request header
        if len(name) == 17 and name.lower() == b"transfer-encoding":
            self._te = value if self._te is None else self._te + b", " + value
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if self.parser.should_upgrade():
            if self.parser.get_method() == b"CONNECT":
                self._refuse(405, "method_not_allowed", "CONNECT is not served here")
                raise _Refused
            # httptools tells llhttp that an upgrade request has no body, and llhttp then stops:
            # _feed reads the request again without the offer (_ignore_upgrade).
            self._offer = (self.parser.get_method(), self.parser.get_http_version())
            return
        if self._te is not None and self._te.rstrip(b" ").lower() != b"chunked":
            # `chunked` and spaces only: llhttp reads `chunked` followed by a tab (which uvicorn strips) as
            # another coding, and would then read the body to the connection's end.
            self._refuse(501, "unsupported_transfer_encoding",
                         "only `Transfer-Encoding: chunked` is supported in a request")
            raise _Refused
        self._body_left = _content_length(self.headers)
        # A chunked body's first line follows the head's CRLF: an empty body ends in `0\r\n\r\n` at once.
        self._tail = b"\r\n" if self._te is not None else b""
        self._phase, self._body_seen = _BODY, self.loop.time()
        super().on_headers_complete()
        if self._body_left != 0 and self.cycle is not None:  # a body (or chunked): it may go unread
            self._watch_answer(self.cycle)

    def _should_upgrade(self) -> bool:
        return False  # llmmeter serves no WebSocket: every upgrade offer is ignored

    def on_body(self, body: bytes) -> None:
        self._moved = True
        if self._body_left is not None:
            self._body_left -= len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        if self._offer is not None:
            return  # the end llhttp gives a head with an upgrade offer: it is read again without it
        self._phase, self._moved = _WAITING, True
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        super().on_message_complete()
        # uvicorn pauses reading past 64 KiB of body the app has not taken; with the body whole,
        # reading goes on so that a client that leaves is seen while its answer is prepared.
        self.flow.resume_reading()
        if self.cycle.response_complete and self.timeout_keep_alive_task is None:
            # Answered before its body ended (the body's bytes stopped uvicorn's idle timer): idle from here.
            self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive,
                                                                self.timeout_keep_alive_handler)

    def _watch_answer(self, cycle: Any) -> None:
        """An answer that starts before its request's body is whole says `connection: close`, so the
        client opens a new connection for its next request; the connection then ends (_linger)."""
        send = cycle.send

        async def send_watched(message: Any) -> None:
            if message["type"] == "http.response.start" and cycle.more_body and not cycle.response_started:
                cycle.keep_alive = False  # uvicorn writes `connection: close` in the head
                self._closing = cycle
            elif (self._closing is cycle and message["type"] == "http.response.body"
                  and not message.get("more_body")):
                cycle.keep_alive = True  # the close is on_response_complete's, not uvicorn's at once
            await send(message)

        cycle.send = send_watched

    def on_response_complete(self) -> None:
        if self._phase == _BODY and self.cycle.response_complete:  # answered before its body was read (401, 413, 429)
            self.server_state.total_requests += 1
            self._linger()
            return
        super().on_response_complete()
        if self._closing is not None and self._closing.response_complete:  # said close; its body ended since
            self._closing = None
            self.transport.close()
        elif self._phase == _STOPPED:
            if not self._owed():
                self.transport.close()
        elif self._held:
            self.loop.call_soon(self._release)
        elif self._phase == _HEAD:  # the next head began early: its clock starts now
            self._head_start = self.loop.time()

    def _release(self) -> None:
        """An answer left: parse what was held behind it."""
        if self._phase != _WAITING or not self._held or self._owed() >= self.limits.max_pipelined:
            return
        held, self._held = self._held, b""
        self._unset_keepalive_if_required()
        self._feed(held)
        self.flow.resume_reading()

    def _linger(self) -> None:
        """The answer is whole but the request's body was not read: where it ends is not known, so
        nothing more on this connection is a request. The client gets the end of the stream at once;
        what it still sends is discarded for a moment (closing on unread bytes would reset the
        connection and could destroy the answer before the client reads it), then the socket closes."""
        self._phase = _LINGER
        for timer in (self._head_timer, self._body_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = None
        self.flow.resume_reading()
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._linger_timer = self.loop.call_later(self.limits.linger_s, self.transport.close)

    def _count(self, n: int) -> None:
        self._head_bytes += n
        if self._head_bytes > self.limits.max_head_bytes:
            self._refuse(431, "request_header_too_large",
                         f"request line, headers and trailers exceed {self.limits.max_head_bytes} bytes")
            raise _Refused
    # -- timeouts --------------------------------------------------------------------
    def _head_expired(self) -> None:
        self._head_timer = None
        if self._phase != _HEAD:
            return
        now = self.loop.time()
        if self.cycle is not None and not self.cycle.response_complete:
            deadline = now + self.limits.head_timeout_s  # still answering the previous request
        else:
            deadline = self._head_start + self.limits.head_timeout_s
        if now < deadline:
            self._head_timer = self.loop.call_at(deadline, self._head_expired)
            return
        self._refuse(408, "request_timeout", f"the request head did not arrive within {self.limits.head_timeout_s} s")

    def _body_expired(self) -> None:
        self._body_timer = None
        if self._phase != _BODY:
            return
        now = self.loop.time()
        if self.flow.read_paused or (self.cycle is not None and self.cycle.waiting_for_100_continue):
            self._body_seen = now  # the wait is the server's, not the client's
        deadline = self._body_seen + self.limits.body_timeout_s
        if now < deadline:
            self._body_timer = self.loop.call_at(deadline, self._body_expired)
            return
        self._refuse(408, "request_timeout", f"no byte of the request body for {self.limits.body_timeout_s} s")

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._send_timer is None and self._phase != _CLOSED:
            self._send_backlog = self.transport.get_write_buffer_size()
            self._send_timer = self.loop.call_later(self.limits.send_timeout_s, self._send_expired)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def _send_expired(self) -> None:
        self._send_timer = None
        if not self.flow.write_paused or self._phase == _CLOSED:
            return
        backlog = self.transport.get_write_buffer_size()
        if backlog < self._send_backlog:  # the client read something: slow, not gone
            self._send_backlog = backlog
            self._send_timer = self.loop.call_later(self.limits.send_timeout_s, self._send_expired)
            return
        # connection_lost follows: the relay hears of it through the disconnect callback and lets go upstream.
        self.transport.abort()

    def timeout_keep_alive_handler(self) -> None:
        self._phase = _CLOSED
        super().timeout_keep_alive_handler()

    def _refuse(self, status: int, code: str, message: str) -> None:
        """Answer `status` if no other response is under way on the connection, and close it."""
        phase, self._phase = self._phase, _CLOSED
        cycle = self.cycle  # in the head, the previous request's; in the body, this one's
        if phase == _BODY:
            free = cycle is not None and not cycle.response_started
        else:
            free = cycle is None or cycle.response_complete
        if free and not self.transport.is_closing():
            self.transport.write(_error(status, code, message))
        self.transport.close()

    # -- the disconnect extension ----------------------------------------------------
    def _watch(self, callback: Callable[[], None] | None) -> None:
        if callback is not None and self._lost:  # the client left before the relay began to watch
            callback()
            return
        self._on_lost = callback
