"""The serving protocol's disconnect hook, over a real socket: a callback set while the
connection is open runs when the client leaves; one set after the client left runs at once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from proxy.server.protocol import DISCONNECT, RelayProtocol

REQUEST = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}"


WAIT = 60  # seconds: a generous deadline for a condition, met at once on an idle machine


async def until(cond: Callable[[], bool]) -> None:
    """Wait for `cond` rather than a fixed time: a loaded machine may take long to deliver a close."""
    async with asyncio.timeout(WAIT):
        while not cond():
            await asyncio.sleep(0.005)


def serve_one(watch_after_leaving: bool) -> list[str]:
    events: list[str] = []

    async def main() -> None:
        reading = asyncio.Event()  # set by the app once it is where the client may leave
        left = asyncio.Event()  # set by the test once the client has closed its socket
        done = asyncio.Event()
        protocols: list[RelayProtocol] = []

        async def app(scope: Any, receive: Any, send: Any) -> None:
            assert scope["type"] == "http"
            await receive()  # the body
            watch = scope["extensions"][DISCONNECT]
            if watch_after_leaving:
                reading.set()
                await left.wait()
                await until(lambda: protocols[0]._lost)  # the server has seen the connection go
                watch(lambda: events.append("called"))
                events.append("registered")
            else:
                watch(lambda: events.append("called"))
                events.append("registered")
                reading.set()
                await left.wait()
                await until(lambda: protocols[0]._lost)
            watch(None)
            done.set()

        def accept() -> RelayProtocol:
            protocols.append(RelayProtocol(config, state, {}, loop))
            return protocols[-1]

        loop = asyncio.get_running_loop()
        config = uvicorn.Config(app, lifespan="off", log_level="warning")
        state = ServerState()
        server = await loop.create_server(accept, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(REQUEST)
        await writer.drain()
        await asyncio.wait_for(reading.wait(), WAIT)
        writer.close()
        left.set()
        await asyncio.wait_for(done.wait(), WAIT)
        server.close()

    asyncio.run(main())
    return events


def test_a_client_leaving_while_watched_is_reported() -> None:
    assert serve_one(watch_after_leaving=False) == ["registered", "called"]


def test_a_client_that_left_before_the_watch_is_reported_at_once() -> None:
    assert serve_one(watch_after_leaving=True) == ["called", "registered"]
