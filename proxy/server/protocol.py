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
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from proxy.server import DISCONNECT
from proxy.server.coalesce import CoalescingTransport

if TYPE_CHECKING:
    from proxy.settings import Settings

__all__ = ["DISCONNECT", "RelayProtocol", "ServerLimits"]

# Where the connection is in reading a request.
_WAITING, _HEAD, _BODY, _CLOSED = range(4)


@dataclass(frozen=True, slots=True)
class ServerLimits:
    head_timeout_s: float = 30.0
    body_timeout_s: float = 60.0
    idle_timeout_s: float = 75.0
    send_timeout_s: float = 120.0
    max_head_bytes: int = 65536  # SDKs send ~1 KiB of head, browsers' cookies stay under 16 KiB

    @classmethod
    def from_settings(cls, settings: Settings) -> ServerLimits:
        return cls(head_timeout_s=settings.head_timeout_s, body_timeout_s=settings.body_timeout_s,
                   idle_timeout_s=settings.idle_timeout_s, send_timeout_s=settings.send_timeout_s)


class _Refused(Exception):
    """Raised in a parser callback once the client was answered: the parser stops there."""


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


class RelayProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with llmmeter's limits, timeouts, coalesced writes and
    disconnect callback (see the module's docstring)."""

    def __init__(self, config: Config, server_state: ServerState, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits, self._before_send = _from_app(self.app)
        # uvicorn's keep-alive timer is the idle timeout (typed int there; call_later takes a float).
        self.timeout_keep_alive = self.limits.idle_timeout_s  # type: ignore[assignment]
        # Every Transfer-Encoding but `chunked` is refused in on_headers_complete, with 501.
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True, lenient_transfer_encoding=True)
        self._phase = _HEAD
        self._head_start = self._body_seen = 0.0
        self._head_bytes = 0  # request line and fields (trailers too) parsed so far, exactly
        self._unparsed = 0  # raw bytes received since a field, the head or a body byte was last finished
        self._moved = False  # the parser finished something in the chunk being fed
        self._te: bytes | None = None
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._send_timer: asyncio.TimerHandle | None = None
        self._send_backlog = 0
        self._on_lost: Callable[[], None] | None = None
        self._lost = False

    # -- the connection --------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        wrapped: Any = CoalescingTransport(cast(asyncio.Transport, transport), self.loop, self._before_send)
        super().connection_made(wrapped)
        self._head_start = self.loop.time()  # a first head is due from the connection's opening
        self._head_timer = self.loop.call_at(self._head_start + self.limits.head_timeout_s, self._head_expired)

    def connection_lost(self, exc: Exception | None) -> None:
        self._phase = _CLOSED
        for timer in (self._head_timer, self._body_timer, self._send_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = self._send_timer = None
        super().connection_lost(exc)
        self._lost = True
        callback, self._on_lost = self._on_lost, None
        if callback is not None:
            callback()

    def data_received(self, data: bytes) -> None:
        phase = self._phase
        if phase == _CLOSED:
            return
        self._unset_keepalive_if_required()
        if phase == _WAITING:  # the next head's first byte: its clock starts
            self._phase, self._head_start = _HEAD, self.loop.time()
        elif phase == _BODY:
            self._body_seen = self.loop.time()  # uvloop's cached loop time: no syscall
        self._moved = False
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError:
            if self._phase != _CLOSED:  # else a callback already answered (431, 501)
                self._phase = _CLOSED
                self.logger.warning("Invalid HTTP request received.")
                self.send_400_response("Invalid HTTP request received.")
            return
        if self._phase in (_HEAD, _BODY):  # a request still being read: the common case skips all this
            self._still_reading(len(data))

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
        super().on_message_begin()
        extensions: Any = {DISCONNECT: self._watch}
        self.scope["extensions"] = extensions
        self._head_bytes, self._te = 0, None
        if self._phase != _HEAD:  # pipelined: it began in the chunk that ended the previous request
            self._phase, self._head_start = _HEAD, self.loop.time()

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        self._moved = True
        if self._phase != _HEAD:
            return  # a chunked body's trailer: never a request header
        if len(name) == 17 and name.lower() == b"transfer-encoding":
            self._te = value if self._te is None else self._te + b", " + value
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if self._te is not None and self._te.strip().lower() != b"chunked":
            self._refuse(501, "unsupported_transfer_encoding",
                         "only `Transfer-Encoding: chunked` is supported in a request")
            raise _Refused
        self._phase, self._body_seen = _BODY, self.loop.time()
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self._moved = True
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._phase, self._moved = _WAITING, True
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        super().on_message_complete()
        if self.cycle.response_complete and self.timeout_keep_alive_task is None:
            # Answered before its body ended (the body's bytes stopped uvicorn's idle timer): idle from here.
            self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive,
                                                                self.timeout_keep_alive_handler)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._phase == _HEAD:  # the next head began early: its clock starts now
            self._head_start = self.loop.time()

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
