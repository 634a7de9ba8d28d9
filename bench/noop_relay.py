"""A relay that meters nothing, on llmmeter's own stack (uvicorn + uvloop + httptools, the
same serving protocol and upstream client): the floor that shows what metering itself costs.
With `--client aiohttp` the same relay forwards through aiohttp's client instead
(bench/aiohttp_client.py), to weigh one upstream client against the other; with
`--protocol stock` it is served by uvicorn's own httptools protocol, without llmmeter's
limits and timeouts (proxy/server/protocol.py), to weigh what they cost.
Benchmark use only.

    python bench/noop_relay.py --upstream http://127.0.0.1:9001 --port 9002 [--client own|aiohttp]
                               [--protocol own|stock]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proxy.server.protocol import RelayProtocol
from proxy.settings import Upstream
from proxy.upstream.client import UpstreamClient

sys.path.insert(0, str(Path(__file__).resolve().parent))

from aiohttp_client import AiohttpClient

Scope = MutableMapping[str, Any]
HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"host", b"content-length"}


def make_app(upstream: str, kind: str = "own") -> Callable[..., Awaitable[None]]:
    client: UpstreamClient | AiohttpClient
    if kind == "aiohttp":
        client = AiohttpClient(connect_timeout=10, read_timeout=600, limit_per_host=100, keepalive_timeout=30)
    else:
        client = UpstreamClient(Upstream(name="noop", base_url=upstream), connect_timeout=10, read_timeout=600)

    async def app(scope: Scope, receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                await send({"type": msg["type"] + ".complete"})
                if msg["type"] == "lifespan.shutdown":
                    if isinstance(client, AiohttpClient):
                        await client.close()
                    else:
                        client.close()
                    return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"] if k not in HOP]
        r = await client.request(scope["method"], upstream + scope["path"], headers, body)
        await send({"type": "http.response.start", "status": r.status,
                    "headers": [(k, v) for k, v in r.raw_headers if k not in HOP]})
        async for chunk in r:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        r.release()

    return app


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--client", choices=("own", "aiohttp"), default="own",
                    help="the upstream client: llmmeter's own (proxy/upstream) or aiohttp's")
    ap.add_argument("--protocol", choices=("own", "stock"), default="own",
                    help="the serving protocol: llmmeter's (proxy/server/protocol.py) or uvicorn's own httptools one")
    a = ap.parse_args()
    uvicorn.run(make_app(a.upstream.rstrip("/"), a.client), host="127.0.0.1", port=a.port, loop="uvloop",
                http=RelayProtocol if a.protocol == "own" else "httptools",
                access_log=False, log_level="warning", server_header=False, date_header=False, proxy_headers=False)
