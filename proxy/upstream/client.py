"""The relay's upstream client: pooled keep-alive connections, at most `max_connections`
per upstream.

Why not a general-purpose client: a no-op relay on aiohttp's client takes about twice the
CPU per request of the same relay on this one (docs/decisions/upstream-client.md). It does
only what a relay needs, and holds itself to what aiohttp and Envoy promise:
- a request is written once: it is re-sent on a fresh connection only when the pooled
  connection was found closed before any byte of it was written — after that, a failure
  is the client's 502, never a second (billed) upstream request;
- at most `max_connections` connections per upstream; requests beyond wait in order for
  one, at most `connect_timeout_s` (then `PoolTimeout`);
- an idle connection is closed after `idle_s` (or sooner when the upstream's
  `Keep-Alive: timeout=N` says it will close first);
- a connection is reused only when its response was read whole and nothing followed it
  (proxy/upstream/connection.py).
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping

from proxy.errors import PoolTimeout
from proxy.settings import Upstream
from proxy.upstream.connection import Connection
from proxy.upstream.egress import Route, open_connection, route_for, unreachable
from proxy.upstream.share import FairShare

_SAFE_TARGET = re.compile(r"[^\x00-\x20\x7f]+").fullmatch


class Response:
    """One response: its head at once, its body read with `async for chunk in response`."""

    __slots__ = ("_conn", "_done", "_owner", "_tenant", "raw_headers", "status")

    def __init__(self, conn: Connection, owner: UpstreamClient, tenant: str | None = None) -> None:
        self._conn, self._owner, self._done = conn, owner, False
        self._tenant = tenant  # set: the exchange holds a slot of this tenant's share
        self.status = conn.status
        self.raw_headers: list[tuple[bytes, bytes]] = conn.headers  # names in lower case

    def header(self, name: bytes) -> str | None:
        """The first value of a header, `name` in lower case."""
        for k, v in self.raw_headers:
            if k == name:
                return v.decode("latin-1")
        return None

    @property
    def content_type(self) -> str:
        """The media type alone, lower case (`text/event-stream`)."""
        value = self.header(b"content-type") or ""
        return value.split(";", 1)[0].strip().lower()

    @property
    def at_end(self) -> bool:
        """The body has been read whole: the chunk just read was the last."""
        return self._conn.at_end

    def __aiter__(self) -> Response:
        return self

    async def __anext__(self) -> bytes:
        chunk = await self._conn.read()
        if not chunk:
            raise StopAsyncIteration
        return chunk

    def release(self) -> None:
        """Done with the response: a connection whose response was read whole goes back to
        the pool (whatever its status: a 429 keeps its connection); any other is closed."""
        if not self._done:
            self._done = True
            self._owner.release(self._conn)
            self._owner.leave(self._tenant)

    def close(self) -> None:
        """Drop the connection (a body not read to its end cannot be reused)."""
        if not self._done:
            self._done = True
            self._conn.drop()
            self._owner.release(self._conn)
            self._owner.leave(self._tenant)


class _Origin:
    """One scheme://host:port of an upstream: how to reach it, and its idle connections."""

    def __init__(self, route: Route) -> None:
        self.route = route
        name = f"[{route.host}]" if ":" in route.host else route.host
        default = 443 if route.tls else 80
        # No zone id (route.host has none) and IDNA for names: what a Host header may carry.
        self.host_header = (name if route.port == default else f"{name}:{route.port}").encode("idna")
        self.idle: list[Connection] = []


class UpstreamClient:
    """Every connection to one upstream; `request(method, absolute_url, headers, body)`."""

    def __init__(self, upstream: Upstream, connect_timeout: float, read_timeout: float, *,
                 env: Mapping[str, str] | None = None,
                 on_waiting: Callable[[int], None] | None = None, tenant_share: int | None = None) -> None:
        self.upstream = upstream
        # A tenant's requests beyond its share wait for it before they ask the pool (proxy/upstream/share.py).
        self.share = FairShare(tenant_share, upstream.name, on_waiting) if tenant_share else None
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self.max_connections, self.idle_s = upstream.max_connections, upstream.idle_s
        self.env = env
        self.on_waiting = on_waiting  # +1 / -1 as requests start and stop waiting for a connection
        self._origins: dict[str, _Origin] = {}
        self._owned: dict[Connection, _Origin] = {}
        self._opening = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._sweep: asyncio.TimerHandle | None = None

    @property
    def open_connections(self) -> int:
        return len(self._owned) + self._opening

    async def request(self, method: str, url: str, headers: Iterable[tuple[str, str]], body: bytes,
                      tenant: str | None = None) -> Response:
        i = url.find("/", url.find("//") + 2)
        origin_url, target = (url, "/") if i == -1 else (url[:i], url[i:])
        origin = self._origins.get(origin_url)
        if origin is None:
            origin = self._origins[origin_url] = _Origin(route_for(self.upstream, origin_url, self.env))
        data = _request_bytes(origin, method, target, headers, body)
        held = tenant if self.share is not None else None
        if held is not None:
            assert self.share is not None
            await self.share.enter(held, self.connect_timeout)
        try:
            conn = await self._acquire(origin)
            try:
                await conn.exchange(data, method == "HEAD")
            except BaseException:
                conn.drop()
                self.release(conn)
                raise
        except BaseException:
            self.leave(held)
            raise
        return Response(conn, self, held)

    def leave(self, tenant: str | None) -> None:
        """An exchange that held a slot of `tenant`'s share is over."""
        if tenant is not None and self.share is not None:
            self.share.leave(tenant)

    async def _acquire(self, origin: _Origin) -> Connection:
        conn = self._take_idle(origin)
        deadline: float | None = None
        while conn is None:
            if self.open_connections >= self.max_connections:
                self._close_idle_elsewhere(origin)
            if self.open_connections < self.max_connections:
                return await self._connect(origin)
            loop = asyncio.get_running_loop()  # only when waiting: it costs a getpid() on 3.11
            if deadline is None:
                deadline = loop.time() + self.connect_timeout
            await self._wait_turn(loop, deadline - loop.time())
            conn = self._take_idle(origin)
        return conn

    def _take_idle(self, origin: _Origin) -> Connection | None:
        while origin.idle:
            conn = origin.idle.pop()
            conn.idle_until = 0.0
            # Found closed before anything was written: the one case where a fresh connection
            # may carry the request instead.
            if conn.reusable():
                return conn
            conn.drop()
        return None

    def _close_idle_elsewhere(self, origin: _Origin) -> None:
        """At the limit with idle connections to the upstream's other origin: free one."""
        for other in self._origins.values():
            if other is not origin and other.idle:
                other.idle.pop(0).drop()  # connection_lost will forget it
                return

    async def _connect(self, origin: _Origin) -> Connection:
        self._opening += 1
        try:
            route = origin.route
            _, conn = await open_connection(
                route, lambda: Connection(self._forget, self.read_timeout, lambda exc: unreachable(route, exc)),
                self.connect_timeout)
        except BaseException:
            self._opening -= 1
            self._wake_one()
            raise
        self._opening -= 1
        self._owned[conn] = origin
        return conn

    async def _wait_turn(self, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        if timeout <= 0:
            raise PoolTimeout(f"no connection to upstream {self.upstream.name!r} came free within "
                              f"{self.connect_timeout:g} s (max_connections = {self.max_connections})")
        waiter = loop.create_future()
        self._waiters.append(waiter)
        if self.on_waiting is not None:
            self.on_waiting(1)
        try:
            await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            raise PoolTimeout(f"no connection to upstream {self.upstream.name!r} came free within "
                              f"{self.connect_timeout:g} s (max_connections = {self.max_connections})") from None
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._wake_one()  # woken, then cancelled: pass the turn on
            raise
        finally:
            if self.on_waiting is not None:
                self.on_waiting(-1)
            if not waiter.done():
                waiter.cancel()

    def release(self, conn: Connection) -> None:
        """An exchange is over: keep the connection for the next request, or let it go."""
        origin = self._owned.get(conn)
        if origin is not None and conn.finish():
            origin.idle.append(conn)
            idle_s = self.idle_s
            if conn.keep_alive_hint is not None:  # close before the upstream does
                idle_s = min(idle_s, max(conn.keep_alive_hint - 1, 0.5))
            conn.idle_until = conn.loop.time() + idle_s
            if self._sweep is None:  # one timer per client, not one per request
                self._sweep = conn.loop.call_at(conn.idle_until, self._close_expired, conn.loop)
        self._wake_one()

    def _close_expired(self, loop: asyncio.AbstractEventLoop) -> None:
        """Closes the connections idle past their time; runs again at the next one's."""
        self._sweep = None
        now, soonest = loop.time(), None
        for origin in self._origins.values():
            for conn in list(origin.idle):
                if conn.idle_until <= now:
                    origin.idle.remove(conn)
                    conn.drop()
                elif soonest is None or conn.idle_until < soonest:
                    soonest = conn.idle_until
        if soonest is not None:
            self._sweep = loop.call_at(soonest, self._close_expired, loop)

    def _forget(self, conn: Connection) -> None:
        origin = self._owned.pop(conn, None)
        if origin is not None and conn in origin.idle:
            origin.idle.remove(conn)
        self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def close(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for conn in list(self._owned):
            conn.drop()
        for origin in self._origins.values():
            origin.idle.clear()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.cancel()


class Upstreams:
    """One client per upstream, owned by the app's lifespan."""

    def __init__(self, upstreams: Iterable[Upstream], connect_timeout: float, read_timeout: float, *,
                 env: Mapping[str, str] | None = None,
                 on_waiting: Callable[[str, int], None] | None = None,
                 tenant_share: Callable[[Upstream], int | None] | None = None) -> None:
        self.clients: dict[str, UpstreamClient] = {}
        for up in upstreams:
            hook = None if on_waiting is None else _bind(on_waiting, up.name)
            share = tenant_share(up) if tenant_share is not None else None
            self.clients[up.name] = UpstreamClient(up, connect_timeout, read_timeout, env=env, on_waiting=hook,
                                                   tenant_share=share)

    def __getitem__(self, name: str) -> UpstreamClient:
        return self.clients[name]

    def close(self) -> None:
        for client in self.clients.values():
            client.close()


def _bind(hook: Callable[[str, int], None], name: str) -> Callable[[int], None]:
    return lambda delta: hook(name, delta)


def _request_bytes(origin: _Origin, method: str, target: str, headers: Iterable[tuple[str, str]],
                   body: bytes) -> bytes:
    route = origin.route
    all_headers = [*headers, *route.proxy_headers]
    lines = [f"{name}: {value}\r\n" for name, value in all_headers]
    block = "".join(lines)
    # A CR or LF inside a name, value or the target would let one request smuggle another.
    if block.count("\n") != len(lines) or block.count("\r") != len(lines) or not _SAFE_TARGET(target):
        raise ValueError("header or request target with a line break")
    if route.absolute_form:  # plain http through an egress proxy: the proxy needs the whole URL
        target = "http://" + origin.host_header.decode("ascii") + target
    length = b"content-length: %d\r\n" % len(body) if body or method in ("POST", "PUT", "PATCH") else b""
    return b"".join((f"{method} {target} HTTP/1.1\r\nhost: ".encode("latin-1"), origin.host_header, b"\r\n",
                     block.encode("latin-1"), length, b"\r\n", body))
