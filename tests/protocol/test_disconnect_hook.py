"""The serving protocol's disconnect hook, over a real socket: a callback set while the
connection is open runs when the client leaves; one set after the client left runs at once."""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from proxy.server.protocol import DISCONNECT, RelayProtocol

REQUEST = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}"


def serve_one(watch_after_leaving: bool) -> list[str]:
    events: list[str] = []

    async def main() -> None:
        left = asyncio.Event()  # set by the test once the client has closed its socket
        done = asyncio.Event()

        async def app(scope: Any, receive: Any, send: Any) -> None:
            assert scope["type"] == "http"
            await receive()  # the body
            watch = scope["extensions"][DISCONNECT]
            if watch_after_leaving:
                await left.wait()
                await asyncio.sleep(0.2)  # the server has seen the connection go
                watch(lambda: events.append("called"))
                events.append("registered")
            else:
                watch(lambda: events.append("called"))
                events.append("registered")
                await left.wait()
                await asyncio.sleep(0.2)
            watch(None)
            done.set()

        loop = asyncio.get_running_loop()
        config = uvicorn.Config(app, lifespan="off", log_level="warning")
        state = ServerState()
        server = await loop.create_server(lambda: RelayProtocol(config, state, {}, loop), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(REQUEST)
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.close()
        left.set()
        await asyncio.wait_for(done.wait(), 5)
        server.close()

    asyncio.run(main())
    return events


def test_a_client_leaving_while_watched_is_reported() -> None:
    assert serve_one(watch_after_leaving=False) == ["registered", "called"]


def test_a_client_that_left_before_the_watch_is_reported_at_once() -> None:
    assert serve_one(watch_after_leaving=True) == ["called", "registered"]
