"""The serving protocol driven by hand: a fake transport, a tiny ASGI app, bytes in, bytes out."""

from __future__ import annotations

import asyncio
import itertools
import selectors
from collections.abc import Callable, Iterable
from typing import Any

import orjson
import uvicorn
from uvicorn.server import ServerState

from proxy.server.protocol import DISCONNECT, RelayProtocol, ServerLimits


class _JumpingSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """Polls without blocking; where the loop would block until its next timer, the clock jumps to it."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:  # no timer at all: only another thread can wake the loop
            return super().select(None)
        ready = super().select(0)
        if not ready:
            self.now += timeout
        return ready


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An event loop on a virtual clock that moves only while the loop would otherwise wait.

    A test of timeouts then depends on the order of events alone: a loaded machine that runs
    the loop late cannot make a 0.2 s sleep outlast a 0.3 s timer, as it can on the real clock."""

    def __init__(self) -> None:
        self._clock = _JumpingSelector()
        super().__init__(self._clock)

    def time(self) -> float:
        return self._clock.now


class FakeTransport:
    """Stands in for the client's socket: notes writes, closing, aborting and reading pauses."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.protocol: asyncio.Protocol | None = None
        self.sends: list[bytes] = []
        self.closed = self.aborted = self.eof = False
        self.reading = True
        self.backlog = 0  # what get_write_buffer_size() reports: bytes the client has not read yet

    @property
    def written(self) -> bytes:
        return b"".join(self.sends)

    def write(self, data: bytes) -> None:
        assert not self.closed, "written after close"
        self.sends.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            assert self.protocol is not None
            self.loop.call_soon(self.protocol.connection_lost, None)

    def abort(self) -> None:
        self.aborted = True
        self.close()

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_write_buffer_size(self) -> int:
        return self.backlog

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8000)}.get(name, default)


class Echo:
    """A tiny ASGI app: reads the whole body, then answers 200 with the headers and body it saw.

    `stream=True`: answers with a chunked stream it never finishes (for the send timeout)."""

    def __init__(self, limits: ServerLimits | None = None, before_send: Callable[[], None] | None = None,
                 stream: bool = False) -> None:
        if limits is not None:
            self.server_limits = limits
        if before_send is not None:
            self.before_send = before_send
        self.stream = stream
        self.seen: list[tuple[list[tuple[bytes, bytes]], bytes]] = []
        self.events: list[str] = []  # "disconnect" from receive(), "lost" from the extension

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        scope["extensions"][DISCONNECT](lambda: self.events.append("lost"))
        body = b""
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                self.events.append("disconnect")
                return
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        self.seen.append((list(scope["headers"]), body))
        if self.stream:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"first", "more_body": True})
            await asyncio.Event().wait()  # the rest never comes: only the client leaving ends this
        out = orjson.dumps({"headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]],
                            "body": body.decode("latin-1")})
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(out))]})
        await send({"type": "http.response.body", "body": out})


class Conn:
    """One accepted connection of the protocol, on the running loop."""

    def __init__(self, app: Any) -> None:
        self.loop = asyncio.get_running_loop()
        config = uvicorn.Config(app, lifespan="off", log_level="warning", proxy_headers=False)
        self.protocol = RelayProtocol(config, ServerState(), {}, self.loop)
        self.transport = FakeTransport(self.loop)
        self.transport.protocol = self.protocol
        self.protocol.connection_made(self.transport)  # type: ignore[arg-type]

    async def feed(self, chunks: Iterable[bytes], settle: bool = True) -> None:
        for chunk in chunks:
            if self.transport.closed:
                break
            self.protocol.data_received(chunk)
        if settle:
            await self.settle()

    async def settle(self) -> None:
        """Let the app's task and the end-of-turn flushes run."""
        for _ in range(20):
            await asyncio.sleep(0)

    async def wait_closed(self, timeout: float) -> bool:
        deadline = self.loop.time() + timeout
        while not self.transport.closed and self.loop.time() < deadline:
            await asyncio.sleep(0.01)
        await self.settle()
        return self.transport.closed


def responses(data: bytes) -> list[tuple[int, dict[bytes, bytes], bytes]]:
    """The responses in what a server wrote: (status, headers, body); bodies by content-length."""
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ")[1])
        headers = dict(line.lower().split(b": ", 1) for line in lines[1:])
        n = int(headers.get(b"content-length", b"0"))
        out.append((status, headers, rest[:n]))
        data = rest[n:]
    return out


def split(data: bytes, cuts: Iterable[int]) -> list[bytes]:
    """`data` cut at the given offsets (any order, repeats allowed)."""
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points)]
