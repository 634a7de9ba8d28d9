"""Fewer sends per response: what the server writes in one event-loop turn leaves in one send().

uvicorn writes a response's head and its body with one send() each. On loopback every
send() wakes the reader, and on a busy machine that wake-up costs a context switch: those
sends were a third of the relay's time (py-spy, README "Benchmarks"). Buffering the writes
of one turn and sending them together at its end halves them for a plain response, and
delays nothing: the buffer leaves before the loop next waits for I/O.

Before any buffer leaves, `before_send` runs: the app's ledger group commit
(proxy/ledger/group.py), so the turn's records are journaled before its bytes go out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any


class CoalescingTransport:
    """Wraps a transport: `write` buffers until the end of the turn; everything else passes on."""

    __slots__ = ("_before_send", "_buf", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop,
                 before_send: Callable[[], None]) -> None:
        self._transport, self._loop, self._before_send = transport, loop, before_send
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
            self._before_send()
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
