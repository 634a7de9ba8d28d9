"""A deliberately misbehaving upstream for the data-plane tests: raw bytes, on real sockets.

Each request is read (head, then a Content-Length body), recorded, and handed to a script
`script(request, conn)` that writes whatever bytes it likes with `conn.send`, may sleep,
and returns True to keep the connection for another request. The server counts
connections, the most open at once, and when each closed, so tests can see what the proxy
did to the upstream: how many requests reached it, on how many connections.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    connection: int  # which connection carried it (1, 2, ...)
    index: int  # which request on that connection (1, 2, ...)


@dataclass
class Conn:
    sock: socket.socket
    number: int
    closed_at: float | None = None

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)


Script = Callable[[Request, Conn], bool]


def answer(status: int = 200, body: bytes = b"{}", headers: tuple[str, ...] = ("content-type: application/json",),
           keep: bool = True) -> Script:
    """A well-formed response with a Content-Length, the connection kept or closed."""
    def script(req: Request, conn: Conn) -> bool:
        head = f"HTTP/1.1 {status} X\r\ncontent-length: {len(body)}\r\n" + "".join(h + "\r\n" for h in headers)
        conn.send(head.encode() + (b"" if keep else b"connection: close\r\n") + b"\r\n" + body)
        return keep
    return script


def raw(data: bytes, keep: bool = False) -> Script:
    def script(req: Request, conn: Conn) -> bool:
        conn.send(data)
        return keep
    return script


@dataclass
class Rogue:
    script: Script
    requests: list[Request] = field(default_factory=list)
    conns: list[Conn] = field(default_factory=list)
    open_now: int = 0
    most_open: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        rogue = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                rogue._serve(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port: int = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def __enter__(self) -> Rogue:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _serve(self, sock: socket.socket) -> None:
        with self.lock:
            conn = Conn(sock, len(self.conns) + 1)
            self.conns.append(conn)
            self.open_now += 1
            self.most_open = max(self.most_open, self.open_now)
        buf = b""
        index = 0
        try:
            while True:
                req, buf = _read_request(sock, buf)
                if req is None:
                    return
                index += 1
                req.connection, req.index = conn.number, index
                with self.lock:
                    self.requests.append(req)
                if not self.script(req, conn):
                    return
        except OSError:
            return
        finally:
            with self.lock:
                self.open_now -= 1
                conn.closed_at = time.monotonic()
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def _read_request(sock: socket.socket, buf: bytes) -> tuple[Request | None, bytes]:
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            return None, buf
        buf += data
    head, buf = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0") or 0)
    while len(buf) < length:
        data = sock.recv(65536)
        if not data:
            return None, buf
        buf += data
    return Request(method, path, headers, buf[:length], 0, 0), buf[length:]
