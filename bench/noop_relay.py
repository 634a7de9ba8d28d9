"""A relay that meters nothing, on llmmeter's own stack (uvicorn + uvloop + httptools +
aiohttp): the floor that shows what metering itself costs. Benchmark use only.

    python bench/noop_relay.py --upstream http://127.0.0.1:9001 --port 9002
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import aiohttp
import uvicorn

Scope = MutableMapping[str, Any]
HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"host", b"content-length"}


def make_app(upstream: str) -> Callable[..., Awaitable[None]]:
    session: aiohttp.ClientSession | None = None

    async def app(scope: Scope, receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]) -> None:
        nonlocal session
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), auto_decompress=False)
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await session.close()  # type: ignore[union-attr]
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        headers = [(k.decode(), v.decode()) for k, v in scope["headers"] if k not in HOP]
        assert session is not None
        async with session.request(scope["method"], upstream + scope["path"], data=body, headers=headers) as r:
            await send({"type": "http.response.start", "status": r.status,
                        "headers": [(k.lower(), v) for k, v in r.raw_headers if k.lower() not in HOP]})
            async for chunk in r.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    return app


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--port", type=int, required=True)
    a = ap.parse_args()
    uvicorn.run(make_app(a.upstream.rstrip("/")), host="127.0.0.1", port=a.port, loop="uvloop", http="httptools",
                access_log=False, log_level="warning", server_header=False, date_header=False)
