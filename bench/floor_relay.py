"""The least a relay written in Python can do: bytes in, bytes out, nothing read but the framing.

No ASGI, no uvicorn, no header handling, no metering: uvloop and httptools only. A client's
request goes to the upstream byte for byte on a kept-alive connection from a pool, and the
answer comes back byte for byte as it arrives (so streams stream); httptools parses both
sides only to know where each message ends. This is the floor under any relay in Python
on this event loop: whatever CPU per request it spends, a Python relay that reads, routes
and meters the traffic spends more. Benchmark use only (it trusts both peers).

Two more modes add, one at a time, what a relay on llmmeter's stack does beyond that, so
`bench/relay_cpu.py --layers` can weigh each layer:
- `task`: each request is handled by a task of its own that awaits the answer's end;
- `client`: the request's line and header fields are read into Python, the task forwards
  it through llmmeter's upstream client (proxy/upstream/client.py) and frames the answer
  anew (chunked), as the no-op relay does, with no ASGI server in between.

    python bench/floor_relay.py --upstream-port 9001 --port 9002 [--mode bytes|task|client]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import httptools
import uvloop

if TYPE_CHECKING:
    from proxy.upstream.client import UpstreamClient

HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"host", b"content-length"}


class Upstream(asyncio.Protocol):
    """One kept-alive connection to the upstream; relays one answer at a time to `client`."""

    def __init__(self, pool: list[Upstream]) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.client: Client | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio's classes
        self.ready.set_result(None)

    def data_received(self, data: bytes) -> None:
        client = self.client
        if client is not None and client.transport is not None:
            client.transport.write(data)
        self.parser.feed_data(data)

    def on_message_complete(self) -> None:
        client, self.client = self.client, None
        self.pool.append(self)
        if client is not None:
            client.answered()

    def connection_lost(self, exc: Exception | None) -> None:
        if self in self.pool:
            self.pool.remove(self)
        if self.client is not None and self.client.transport is not None:
            self.client.transport.close()


class Client(asyncio.Protocol):
    """One client connection: each request it sends goes whole to a pooled upstream connection."""

    def __init__(self, relay: Relay, in_task: bool) -> None:
        self.relay = relay
        self.in_task = in_task
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.parts: list[bytes] = []
        self.waiting: list[bytes] = []  # whole requests the upstream has not been sent yet
        self.busy = False
        self.done: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio's classes

    def data_received(self, data: bytes) -> None:
        self.parts.append(data)
        self.parser.feed_data(data)

    def on_message_complete(self) -> None:
        # The benchmark's clients send one request at a time: the bytes received so far are this request.
        self.waiting.append(b"".join(self.parts))
        self.parts = []
        if not self.busy:
            self._next()

    def _next(self) -> None:
        if not self.waiting:
            self.busy = False
        elif self.in_task:
            self.busy = True
            asyncio.get_running_loop().create_task(self._handle(self.waiting.pop(0)))
        else:
            self.busy = True
            self.relay.send(self, self.waiting.pop(0))

    async def _handle(self, request: bytes) -> None:
        self.done = asyncio.get_running_loop().create_future()
        self.relay.send(self, request)
        await self.done
        self._next()

    def answered(self) -> None:
        if self.done is not None:
            self.done.set_result(None)
        else:
            self._next()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


class Relay:
    def __init__(self, port: int) -> None:
        self.port = port
        self.pool: list[Upstream] = []

    def send(self, client: Client, request: bytes) -> None:
        if self.pool:
            up = self.pool.pop()
            up.client = client
            assert up.transport is not None
            up.transport.write(request)
        else:
            asyncio.get_running_loop().create_task(self._open(client, request))

    async def _open(self, client: Client, request: bytes) -> None:
        loop = asyncio.get_running_loop()
        _, up = await loop.create_connection(lambda: Upstream(self.pool), "127.0.0.1", self.port)
        await up.ready
        up.client = client
        assert up.transport is not None
        up.transport.write(request)


class ClientParsed(asyncio.Protocol):
    """`--mode client`: the request read into Python, forwarded by llmmeter's upstream client."""

    def __init__(self, base: str, upstream: UpstreamClient) -> None:
        self.base, self.upstream = base, upstream
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_begin(self) -> None:
        self.headers, self.body = [], []

    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        method = self.parser.get_method().decode()
        asyncio.get_running_loop().create_task(self._handle(method, self.url.decode(), self.headers,
                                                            b"".join(self.body)))

    async def _handle(self, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        sent = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers if k not in HOP]
        r = await self.upstream.request(method, self.base + path, sent, body)
        head = [b"HTTP/1.1 %d OK\r\n" % r.status]
        head += [k + b": " + v + b"\r\n" for k, v in r.raw_headers if k not in HOP]
        assert self.transport is not None
        self.transport.write(b"".join(head) + b"transfer-encoding: chunked\r\n\r\n")
        async for chunk in r:
            if chunk:
                self.transport.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.transport.write(b"0\r\n\r\n")
        r.release()


async def serve(upstream_port: int, port: int, mode: str) -> None:
    loop = asyncio.get_running_loop()
    if mode == "client":  # llmmeter is imported only here: the other modes' memory is the floor's own
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from proxy.settings import Upstream as UpstreamSettings
        from proxy.upstream.client import UpstreamClient

        base = f"http://127.0.0.1:{upstream_port}"
        upstream = UpstreamClient(UpstreamSettings(name="floor", base_url=base), connect_timeout=10, read_timeout=600)
        server = await loop.create_server(lambda: ClientParsed(base, upstream), "127.0.0.1", port, backlog=4096)
    else:
        relay = Relay(upstream_port)
        server = await loop.create_server(lambda: Client(relay, mode == "task"), "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream-port", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", choices=("bytes", "task", "client"), default="bytes")
    a = ap.parse_args()
    uvloop.run(serve(a.upstream_port, a.port, a.mode))


if __name__ == "__main__":
    main()
