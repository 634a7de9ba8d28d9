"""Local servers for the egress tests: a private CA made with the `openssl` CLI, an HTTPS
server verified by it, and an HTTP CONNECT proxy. Everything listens on 127.0.0.1 and the
proxy connects only to 127.0.0.1, whatever host a request names."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import cast

Subject = tuple[tuple[tuple[str, str], ...], ...]  # getpeercert()["subject"]
_LEAF = """basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""
_CONFIG = f"""\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
{_LEAF}extendedKeyUsage = serverAuth
subjectAltName = DNS:api.example.test,IP:127.0.0.1
[other]
{_LEAF}extendedKeyUsage = serverAuth
subjectAltName = DNS:other.example.test
[client]
{_LEAF}extendedKeyUsage = clientAuth
subjectAltName = DNS:llmmeter-client
"""

@dataclass(frozen=True)
class Pki:
    """PEM files: `ca` signs the server certificates and `client`; `rogue_ca` signs `rogue_client`."""

    ca: Path
    server: tuple[Path, Path]  # api.example.test and 127.0.0.1
    other: tuple[Path, Path]  # other.example.test only
    client: tuple[Path, Path]
    rogue_client: tuple[Path, Path]


def make_pki(d: Path) -> Pki:
    config = d / "openssl.cnf"
    config.write_text(_CONFIG)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)

    def new_ca(name: str) -> tuple[Path, Path]:
        openssl("req", "-x509", "-config", str(config), "-extensions", "ca", "-newkey", "ec",
                "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f"{name}.key",
                "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN=llmmeter test {name}")
        return d / f"{name}.pem", d / f"{name}.key"

    def leaf(name: str, kind: str, ca: tuple[Path, Path], serial: int) -> tuple[Path, Path]:
        openssl("req", "-new", "-config", str(config), "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", f"/CN={name}")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", str(ca[0]), "-CAkey", str(ca[1]),
                "-set_serial", str(serial), "-days", "2", "-extfile", str(config), "-extensions", kind,
                "-out", f"{name}.pem")
        return d / f"{name}.pem", d / f"{name}.key"

    ca, rogue = new_ca("ca"), new_ca("rogue-ca")
    return Pki(ca=ca[0], server=leaf("api.example.test", "server", ca, 1),
               other=leaf("other.example.test", "other", ca, 2),
               client=leaf("llmmeter-client", "client", ca, 3),
               rogue_client=leaf("rogue-client", "client", rogue, 4))


def dead_port() -> int:
    """A 127.0.0.1 port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Server:
    server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def _start(self, ctx: ssl.SSLContext | None) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=ctx)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        assert self.server is not None
        self.server.close()


class TlsServer:
    """HTTPS: answers any request with `hello from tls` (and the client certificate's name).

    Blocking sockets in threads, not asyncio: asyncio's server drops a failed handshake
    without sending OpenSSL's alert, and the alerts are what the client's messages name."""

    def __init__(self, cert: tuple[Path, Path], *, client_ca: Path | None = None,
                 max_version: ssl.TLSVersion | None = None, greeting: bytes | None = None) -> None:
        self.greeting = greeting  # sent right after the handshake, unasked, then the connection closes
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(*cert)
        if client_ca is not None:
            self.ctx.verify_mode = ssl.CERT_REQUIRED
            self.ctx.load_verify_locations(client_ca)
        if max_version is not None:
            self.ctx.maximum_version = max_version
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.port = int(self.sock.getsockname()[1])
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)

    async def __aenter__(self) -> TlsServer:
        self.thread.start()
        return self

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.stop.set()
        await asyncio.to_thread(self.thread.join)
        self.sock.close()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        raw = conn.dup()  # wrap_socket detaches `conn`
        with raw, contextlib.suppress(OSError):
            tls = self.ctx.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
            try:
                tls.do_handshake()
            except ssl.SSLError:
                # Close only when the client has: closing with its request unread would reset the
                # connection before it reads the alert (a TLS 1.3 client is already writing).
                while raw.recv(65536):
                    pass
                tls.close()
                return
            with tls:
                if self.greeting is not None:
                    tls.sendall(self.greeting)
                    tls.unwrap()
                    return
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = tls.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                subject = cast(Subject, (tls.getpeercert() or {}).get("subject", ()))
                names = [v for rdn in subject for k, v in rdn if k == "commonName"]
                body = b"hello from tls" + (f" to {names[0]}".encode() if names else b"")
                tls.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
                            % (len(body), body))
                tls.unwrap()


@dataclass
class Seen:
    method: str
    target: str
    headers: dict[str, str] = field(default_factory=dict)


class ConnectProxy(_Server):
    """An HTTP proxy. CONNECT host:port tunnels to 127.0.0.1:port; an absolute-form request is
    answered by the proxy itself (`proxied GET <url>`). `auth`: the Proxy-Authorization value
    required (else 407); `reply`: bytes sent to every CONNECT instead of tunnelling; `silent`:
    never answers."""

    def __init__(self, *, auth: str | None = None, reply: bytes | None = None, silent: bool = False,
                 tls: tuple[Path, Path] | None = None) -> None:
        self.auth, self.reply, self.silent = auth, reply, silent
        self.ctx: ssl.SSLContext | None = None
        if tls is not None:
            self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.ctx.load_cert_chain(*tls)
        self.seen: list[Seen] = []
        self.tunnels = 0

    async def __aenter__(self) -> ConnectProxy:
        await self._start(self.ctx)
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            method, target, _ = head[0].split(" ", 2)
            headers = dict(line.lower().split(": ", 1) for line in head[1:] if line)
            self.seen.append(Seen(method, target, headers))
            if self.silent:
                await reader.read()
            elif self.auth is not None and headers.get("proxy-authorization") != self.auth.lower():
                writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                             b"proxy-authenticate: Basic realm=\"test\"\r\ncontent-length: 0\r\n\r\n")
            elif method != "CONNECT":
                body = f"proxied {method} {target}".encode()
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
                             % (len(body), body))
            elif self.reply is not None:
                writer.write(self.reply)
            else:
                await self._tunnel(int(target.rsplit(":", 1)[1]), reader, writer)
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _tunnel(self, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        self.tunnels += 1
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))


class SaysHttp(_Server):
    """Plain TCP that answers anything with an HTTP error: what a TLS client meets on an http port."""

    async def __aenter__(self) -> SaysHttp:
        await self._start(None)
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            await writer.drain()
        writer.close()
