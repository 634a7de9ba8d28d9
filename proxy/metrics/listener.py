"""`server.metrics_bind`: /metrics (with /healthz and /readyz) on a listener of its own.

Prometheus then reaches a port that serves nothing else, e.g. a loopback one, while /v1 is
open to clients on another address. The listener runs in the serving process's own event
loop (an asyncio server the app's lifespan starts and stops, so signals stay the main
server's) and speaks llmmeter's hardened protocol. With several workers each one binds the
address with SO_REUSEPORT and the kernel spreads the scrapes; every worker's answer sums all
workers' metric files.
"""

from __future__ import annotations

import asyncio
import socket
from typing import TYPE_CHECKING, Any

import uvicorn
from uvicorn.server import ServerState

if TYPE_CHECKING:
    from proxy.server.protocol import ServerLimits


class _WithLimits:
    """The admin app as the serving protocol reads it: with the configured limits and timeouts
    (`server.head_timeout_s` and the others), not the protocol's defaults."""

    def __init__(self, app: Any, limits: ServerLimits) -> None:
        self.app, self.server_limits = app, limits

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


class MetricsListener:
    def __init__(self, app: Any, host: str, port: int, shared: bool, limits: ServerLimits) -> None:
        from proxy.server.protocol import RelayProtocol

        app = _WithLimits(app, limits)

        self.address = (host, port)
        self.shared = shared
        self.config = uvicorn.Config(app, host=host, port=port, http=RelayProtocol, lifespan="off",
                                     access_log=False, server_header=False, date_header=False,
                                     log_level="warning", proxy_headers=False)
        self.config.load()
        self.state = ServerState()
        self.server: asyncio.Server | None = None

    async def start(self) -> None:
        host, port = self.address
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if self.shared:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
        except OSError as e:
            sock.close()
            raise OSError(e.errno, f"server.metrics_bind {host}:{port}: {e.strerror}") from e
        config, state = self.config, self.state
        protocol = config.http_protocol_class
        self.server = await asyncio.get_running_loop().create_server(
            lambda: protocol(config=config, server_state=state, app_state={}),  # type: ignore[call-arg]
            sock=sock, backlog=config.backlog)

    async def stop(self) -> None:
        """Stop accepting; scrapes under way end with their answers (each is one short request)."""
        if self.server is None:
            return
        self.server.close()
        for connection in list(self.state.connections):
            connection.shutdown()
        await self.server.wait_closed()
        self.server = None
