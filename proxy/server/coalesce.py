"""Fewer sends per response: what the server writes in one event-loop turn leaves in one send().

uvicorn writes a response's head and its body with one send() each. On loopback every
send() wakes the reader, and on a busy machine that wake-up costs a context switch: those
sends were a third of the relay's time (py-spy, README "Benchmarks"). Buffering the writes
of one turn and sending them together at its end halves them for a plain response, and
delays nothing: the buffer leaves before the loop next waits for I/O.

Before any buffer leaves, the callables in BEFORE_SEND run: the ledger's group commit
(proxy/ledger/group.py), so the turn's records are journaled before its bytes go out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any, cast

from proxy.server.protocol import HeadLimitedProtocol

DISCONNECT = "llmmeter.disconnect"

# Registered by the app at start-up, removed at shutdown; each is a no-op when it holds nothing.
BEFORE_SEND: list[Callable[[], None]] = []


class CoalescingTransport:
    """Wraps a transport: `write` buffers until the end of the turn; everything else passes on."""

    __slots__ = ("_buf", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport, self._loop = transport, loop
        self._buf: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._buf:
            self._loop.call_soon(self.flush)
        self._buf.append(bytes(data))

    def writelines(self, lines: Iterable[bytes | bytearray | memoryview]) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        buf = self._buf
        if buf:
            for hook in BEFORE_SEND:
                hook()
            self._buf = []
            if not self._transport.is_closing():
                self._transport.write(buf[0] if len(buf) == 1 else b"".join(buf))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._buf = []
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(len(b) for b in self._buf)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class RelayProtocol(HeadLimitedProtocol):
    """The serving protocol: head-size limit, coalesced writes, and a disconnect callback.

    ASGI tells an app that its client left only through `receive()`, so an app must keep a
    task waiting in it; on Python 3.11 that task and its wait cost three getpid() syscalls
    per request. Instead, scope["extensions"][DISCONNECT] takes a callable (or None), called
    once if the connection is lost while it is set (at once if it already was).
    """

    _on_lost: Callable[[], None] | None = None
    _lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        wrapped: Any = CoalescingTransport(cast(asyncio.Transport, transport), self.loop)
        super().connection_made(wrapped)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        extensions: Any = {DISCONNECT: self._watch}
        self.scope["extensions"] = extensions

    def _watch(self, callback: Callable[[], None] | None) -> None:
        if callback is not None and self._lost:  # the client left before the relay began to watch
            callback()
            return
        self._on_lost = callback

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._lost = True
        callback, self._on_lost = self._on_lost, None
        if callback is not None:
            callback()
