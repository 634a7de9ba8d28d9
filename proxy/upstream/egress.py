"""Egress: how one upstream origin is reached (directly or through an HTTP proxy) and why not.

`route_for` decides once per origin: the proxy (`upstream.proxy`, else HTTPS_PROXY /
HTTP_PROXY / NO_PROXY as urllib reads them) and the TLS context (`ca_file` or the system
store, `client_cert` / `client_key`). `open_connection` does the I/O of each new connection:
TCP, an HTTP CONNECT tunnel for https through a proxy, TLS with `loop.start_tls` (asyncio's
and uvloop's), then hands the transport to the caller's protocol. Every failure is an
`Unreachable` saying which step failed and why; credentials never appear in a message.
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import unquote, urlsplit

from proxy.errors import ConfigError, Unreachable
from proxy.settings import Upstream

P = TypeVar("P", bound=asyncio.Protocol)

PROXY_HEAD_LIMIT = 16 * 1024  # a CONNECT answer is a status line and a few headers
_MISMATCH_CODES = frozenset({62, 64})  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH
# Alerts a server sends when it refuses (or misses) the client's certificate.
_CLIENT_CERT_ALERTS = frozenset({
    "certificate required", "bad certificate", "unknown ca", "certificate unknown",
    "certificate expired", "certificate revoked", "unsupported certificate", "access denied",
})


@dataclass(frozen=True, slots=True)
class ProxyEndpoint:
    """An HTTP proxy on the way to an upstream."""

    tls: bool  # an https:// proxy: TLS to the proxy itself, the upstream's TLS inside it
    host: str
    port: int
    authorization: str | None = field(default=None, repr=False)  # "Basic ...", from the URL's user:pass
    ssl: ssl.SSLContext | None = field(default=None, repr=False)

    def describe(self) -> str:
        where = _hostport(self.host, self.port)
        return f"https://{where}" if self.tls else where


@dataclass(frozen=True, slots=True)
class Route:
    """How to reach one origin (scheme://host:port) of one upstream."""

    tls: bool
    host: str  # for SNI, Host and CONNECT: an IPv6 address without brackets or zone id
    connect_host: str  # for create_connection: an IPv6 address keeps its zone id (fe80::1%eth0)
    port: int
    ssl: ssl.SSLContext | None  # None for http
    proxy: ProxyEndpoint | None  # None: direct
    absolute_form: bool  # plain http through a proxy: the request target is the absolute URL
    proxy_headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # for absolute-form requests
    trust: str = "the system store"  # what verifies the upstream's certificate, for messages
    client_cert: bool = False  # whether a client certificate is offered, for messages

    def describe(self) -> str:
        where = f"{'https' if self.tls else 'http'}://{_hostport(self.host, self.port)}"
        return f"{where} via proxy {self.proxy.describe()}" if self.proxy else where


def route_for(upstream: Upstream, origin: str, env: Mapping[str, str] | None = None) -> Route:
    """origin = "https://host:port" as the client computes it from base_url."""
    scheme, host, connect_host, port = _parse_origin(origin)
    tls = scheme == "https"
    proxy = _choose_proxy(upstream, scheme, host, port, os.environ if env is None else env)
    headers: tuple[tuple[str, str], ...] = ()
    if proxy is not None and not tls and proxy.authorization:
        headers = (("proxy-authorization", proxy.authorization),)
    return Route(tls=tls, host=host, connect_host=connect_host, port=port,
                 ssl=_upstream_context(upstream) if tls else None, proxy=proxy,
                 absolute_form=proxy is not None and not tls, proxy_headers=headers,
                 trust=f"ca_file {upstream.ca_file}" if upstream.ca_file else "the system store",
                 client_cert=tls and upstream.client_cert is not None)


async def open_connection(route: Route, protocol_factory: Callable[[], P],
                          timeout: float) -> tuple[asyncio.Transport, P]:
    """A connection along `route` with a protocol from `protocol_factory` on it.

    Raises Unreachable saying why, or TimeoutError when `timeout` passes first.
    """
    attempt = _Attempt(route)
    try:
        async with asyncio.timeout(timeout):
            return await attempt.open(protocol_factory, timeout)
    except TimeoutError as e:
        attempt.abort()
        if e.errno is not None:  # the kernel gave up connecting: a network answer, not our deadline
            raise _unreachable(route, attempt.step, e) from e
        raise TimeoutError(f"{route.describe()}: {_STEPS[attempt.step]} took over {timeout:g}s") from None
    except OSError as e:  # ssl.SSLError included
        attempt.abort()
        raise _unreachable(route, attempt.step, e) from e
    except BaseException:
        attempt.abort()
        raise


def unreachable(route: Route, exc: OSError) -> Unreachable:
    """The Unreachable for an error that ends a connection before its first response byte.

    TLS 1.3 servers refuse a client certificate after the client's handshake is done, so
    that refusal reaches the caller's protocol (connection_lost) rather than open_connection.
    """
    return _unreachable(route, "open", exc)


def _unreachable(route: Route, step: str, exc: OSError) -> Unreachable:
    return Unreachable(f"{route.describe()}: {_why(route, step, exc)}", _why(route, step, exc, named=False))


_STEPS = {
    "connect": "connecting",
    "proxy": "connecting to the egress proxy",
    "answer": "waiting for the egress proxy's answer to CONNECT",
    "tls": "the TLS handshake",
}


class _Attempt:
    """One connection being opened: which step it is at, what to close if it fails."""

    def __init__(self, route: Route) -> None:
        self.route = route
        self.step = "proxy" if route.proxy else "connect"
        self.raw: asyncio.Transport | None = None
        self.tls: asyncio.Transport | None = None

    async def open(self, factory: Callable[[], P], timeout: float) -> tuple[asyncio.Transport, P]:
        route, proxy, loop = self.route, self.route.proxy, asyncio.get_running_loop()
        if not route.tls:  # http, direct or to the proxy (absolute form): the caller's protocol at once
            if proxy is None:
                return await loop.create_connection(factory, route.connect_host, route.port)
            return await loop.create_connection(factory, proxy.host, proxy.port, ssl=proxy.ssl,
                                                server_hostname=proxy.host if proxy.ssl else None)
        holder = _Holder(loop)
        if proxy is None:
            self.raw, _ = await loop.create_connection(lambda: holder, route.connect_host, route.port)
        else:
            self.raw, _ = await loop.create_connection(lambda: holder, proxy.host, proxy.port, ssl=proxy.ssl,
                                                       server_hostname=proxy.host if proxy.ssl else None)
            self.step = "answer"
            await self._connect_through(holder, proxy)
        self.step = "tls"
        assert route.ssl is not None  # route_for gives every https route a context
        # One more second than our deadline, so that the deadline is what reports a slow handshake.
        self.tls = await loop.start_tls(self.raw, holder, route.ssl, server_hostname=route.host,
                                        ssl_handshake_timeout=timeout + 1.0)
        if self.tls is None:
            raise Unreachable(f"{route.describe()}: the event loop could not start TLS", "TLS could not be started")
        if holder.closed:
            exc = holder.lost
            if isinstance(exc, OSError):
                raise unreachable(route, exc)
            raise Unreachable(f"{route.describe()}: the connection closed right after the TLS handshake",
                              "the connection closed right after the TLS handshake")
        protocol = factory()
        holder.hand_over(self.tls, protocol)
        return self.tls, protocol

    def abort(self) -> None:
        for transport in (self.tls, self.raw):
            if transport is not None:
                transport.abort()

    async def _connect_through(self, holder: _Holder, proxy: ProxyEndpoint) -> None:
        assert self.raw is not None
        host = self.route.host
        authority = _hostport(host if host.isascii() else host.encode("idna").decode("ascii"), self.route.port)
        lines = [f"CONNECT {authority} HTTP/1.1", f"host: {authority}"]
        if proxy.authorization:
            lines.append(f"proxy-authorization: {proxy.authorization}")
        holder.await_answer(self.raw)
        self.raw.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        try:
            data = await holder.answer
        except Unreachable as e:
            raise Unreachable(f"{self.route.describe()}: egress proxy {e} to CONNECT {authority}",
                              f"the egress proxy {e.what} to CONNECT") from None
        head, _, after = data.partition(b"\r\n\r\n")
        status = head.split(b"\r\n", 1)[0].decode("latin-1")
        version, _, rest = status.partition(" ")
        shown = "".join(c if c.isprintable() else "?" for c in rest.strip())[:100]
        where = f"{self.route.describe()}: egress proxy"
        if not version.startswith("HTTP/1.") or not rest[:3].isdigit():
            raise Unreachable(f"{where} answered CONNECT {authority} with something not HTTP",
                              "the egress proxy answered CONNECT with something not HTTP")
        if rest[0] != "2":
            hint = " (proxy credentials missing or refused)" if rest[:3] == "407" else ""
            raise Unreachable(f"{where} answered {shown} to CONNECT {authority}{hint}",
                              f"the egress proxy answered {shown} to CONNECT{hint}")
        if after:  # the upstream's TLS has not started: these bytes are nobody's
            raise Unreachable(f"{where} sent {len(after)} bytes after its answer to CONNECT {authority}",
                              "the egress proxy sent bytes after its answer to CONNECT")


class _Holder(asyncio.Protocol):
    """The connection's protocol until the caller's takes over: reads a proxy's answer to
    CONNECT, then keeps what TLS delivers before the hand-over (uvloop may schedule it first)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.answer: asyncio.Future[bytes] = loop.create_future()
        self.reading_answer = False
        self.head = bytearray()
        self.early: list[bytes] = []
        self.eof = False
        self.closed = False
        self.lost: Exception | None = None
        self.target: asyncio.Protocol | None = None
        self.raw: asyncio.Transport | None = None

    def await_answer(self, raw: asyncio.Transport) -> None:
        self.raw, self.reading_answer = raw, True

    def hand_over(self, transport: asyncio.Transport, protocol: asyncio.Protocol) -> None:
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        # Callbacks the loop scheduled on this object before set_protocol are forwarded.
        self.target = protocol
        for chunk in self.early:
            protocol.data_received(chunk)
        if self.eof and not protocol.eof_received():
            transport.close()

    def data_received(self, data: bytes) -> None:
        if self.target is not None:
            self.target.data_received(data)
        elif not self.reading_answer:
            self.early.append(data)
        else:
            self._read_answer(data)

    def _read_answer(self, data: bytes) -> None:
        self.head += data
        end = self.head.find(b"\r\n\r\n")
        if end == -1 and len(self.head) <= PROXY_HEAD_LIMIT:
            return
        self.reading_answer = False
        if end == -1 or end + 4 > PROXY_HEAD_LIMIT:
            too_long = f"sent an answer head over {PROXY_HEAD_LIMIT} bytes"
            self.answer.set_exception(Unreachable(too_long, too_long))
        else:
            assert self.raw is not None
            self.raw.pause_reading()  # start_tls resumes reading once TLS has the connection
            self.answer.set_result(bytes(self.head))

    def eof_received(self) -> bool | None:
        if self.target is not None:
            return self.target.eof_received()
        if self.reading_answer:
            self._answerless(None)
            return None
        self.eof = True  # replayed to the caller's protocol; a TLS transport closes after EOF anyway
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.target is not None:
            self.target.connection_lost(exc)
            return
        self.closed, self.lost = True, exc
        if self.reading_answer:
            self._answerless(exc)

    def pause_writing(self) -> None:
        if self.target is not None:
            self.target.pause_writing()

    def resume_writing(self) -> None:
        if self.target is not None:
            self.target.resume_writing()

    def _answerless(self, exc: Exception | None) -> None:
        self.reading_answer = False
        if not self.answer.done():
            why = f" ({exc})" if exc else ""
            self.answer.set_exception(Unreachable(f"closed the connection{why} without an answer",
                                                  "closed the connection without an answer"))


def _why(route: Route, step: str, exc: OSError, *, named: bool = True) -> str:
    """Why a connection failed. `named`: with addresses, names and the ca_file path (for the
    log); without, only what failed (for the client)."""
    proxy = route.proxy
    if step == "proxy" and proxy is not None:
        peer = f"the egress proxy {proxy.describe()}" if named else "the egress proxy"
        name = proxy.host if named else "the egress proxy's name"
        if isinstance(exc, ssl.SSLError):
            return _tls_why(peer, exc, has_client_cert=False, trust=route.trust, named=named)
    else:
        peer = _hostport(route.host, route.port) if named else "the upstream"
        name = route.host if named else "the upstream's name"
        if step == "tls" or isinstance(exc, ssl.SSLError):
            return _tls_why(peer, exc, has_client_cert=route.client_cert, trust=route.trust, named=named)
    # An OSError's text may carry the address it tried: only its strerror goes to a client.
    text = _text(exc) if named else exc.strerror or type(exc).__name__
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve {name} ({text})"
    if isinstance(exc, ConnectionRefusedError):
        return f"cannot connect to {peer}: connection refused"
    if step == "open":
        return f"the connection to {peer} failed before any answer ({text})"
    return f"cannot connect to {peer} ({text})"


def _tls_why(peer: str, exc: OSError, *, has_client_cert: bool, trust: str, named: bool) -> str:
    checked = f"; checked against {trust}" if named else ""
    if isinstance(exc, ssl.SSLCertVerificationError):
        detail = exc.verify_message or _text(exc)
        if exc.verify_code in _MISMATCH_CODES:
            if not named:  # OpenSSL's text names the host the certificate was checked for
                return f"TLS: the certificate of {peer} is not for that name"
            return f"TLS: the certificate of {peer} is not for that name ({detail})"
        return f"TLS: the certificate of {peer} is not trusted ({detail}{checked})"
    reason = exc.reason if isinstance(exc, ssl.SSLError) else None
    if reason and "ALERT_" in reason:
        alert = reason.split("ALERT_", 1)[1].lower().replace("_", " ")
        if alert in _CLIENT_CERT_ALERTS and has_client_cert:
            return f"TLS: {peer} rejected the client certificate (alert: {alert})"
        if alert in _CLIENT_CERT_ALERTS:
            return f"TLS: {peer} requires a client certificate, and client_cert is not set (alert: {alert})"
        hint = "; no client certificate is configured" if alert == "handshake failure" and not has_client_cert else ""
        return f"TLS handshake with {peer} failed: it sent alert '{alert}'{hint}"
    if reason == "WRONG_VERSION_NUMBER":
        return f"TLS handshake with {peer} failed (wrong version number: is it serving TLS on that port?)"
    if isinstance(exc, ssl.SSLEOFError | ConnectionError):
        return f"TLS handshake with {peer} failed: the connection was closed during it"
    detail = reason.lower().replace("_", " ") if reason else (_text(exc) if named else "")
    return f"TLS handshake with {peer} failed ({detail})" if detail else f"TLS handshake with {peer} failed"


def _text(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _parse_origin(origin: str) -> tuple[str, str, str, int]:
    """(scheme, host, connect_host, port); an IPv6 zone id (RFC 6874's %25eth0) is kept for connecting only."""
    scheme, sep, rest = origin.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in ("http", "https"):
        raise ValueError(f"not an http(s) origin: {origin!r}")
    rest = rest.split("/", 1)[0]
    if rest.startswith("["):
        inside, _, after = rest[1:].partition("]")
        port_text = after[1:] if after.startswith(":") else ""
        host, _, zone = unquote(inside).partition("%")
        connect_host = f"{host}%{zone}" if zone else host
    else:
        host, _, port_text = rest.partition(":")
        connect_host = host
    if not host or (port_text and not port_text.isdigit()):
        raise ValueError(f"not an http(s) origin: {origin!r}")
    port = int(port_text) if port_text else (443 if scheme == "https" else 80)
    return scheme, host, connect_host, port


def _upstream_context(upstream: Upstream) -> ssl.SSLContext:
    """Built once per route: ca_file replaces the system store; client_cert/client_key for mutual TLS."""
    context = _trust(upstream)
    if upstream.client_key is not None and upstream.client_cert is None:
        raise ConfigError(f"upstream {upstream.name}: client_key is set without client_cert")
    if upstream.client_cert is not None:
        try:
            context.load_cert_chain(upstream.client_cert, upstream.client_key)
        except (OSError, ValueError) as e:
            raise ConfigError(f"upstream {upstream.name}: cannot load client_cert {upstream.client_cert}"
                              f"{f' / client_key {upstream.client_key}' if upstream.client_key else ''}"
                              f" ({_file_error(e)})") from e
    context.set_alpn_protocols(["http/1.1"])
    return context


def _trust(upstream: Upstream) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cafile=upstream.ca_file)
    except (OSError, ValueError) as e:
        raise ConfigError(f"upstream {upstream.name}: cannot load ca_file {upstream.ca_file} "
                          f"({_file_error(e)})") from e


def _file_error(e: BaseException) -> str:
    if isinstance(e, ssl.SSLError):
        return e.reason.lower().replace("_", " ") if e.reason else "not a usable PEM file"
    if isinstance(e, OSError):
        return e.strerror or type(e).__name__
    return "not a usable PEM file"


def _choose_proxy(upstream: Upstream, scheme: str, host: str, port: int,
                  env: Mapping[str, str]) -> ProxyEndpoint | None:
    """upstream.proxy overrides the environment entirely (NO_PROXY included)."""
    if upstream.proxy is not None:
        if upstream.proxy.strip().lower() == "none":
            return None
        return _parse_proxy(upstream.proxy, "upstream.proxy", upstream)
    proxies = _env_proxies(env)
    url = proxies.get(scheme)
    if not url or _bypass(host, port, proxies.get("no")):
        return None
    return _parse_proxy(url, f"{scheme}_proxy in the environment", upstream)


def _env_proxies(env: Mapping[str, str]) -> dict[str, str]:
    """urllib.request.getproxies_environment over `env`: lower-case names win over upper-case."""
    found: dict[str, str] = {}
    for name, value in env.items():
        if value and name[-6:].lower() == "_proxy":
            found[name[:-6].lower()] = value
    if "REQUEST_METHOD" in env:  # CGI: HTTP_PROXY may come from a client's Proxy header (httpoxy)
        found.pop("http", None)
    for name, value in env.items():
        if name[-6:] == "_proxy":
            if value:
                found[name[:-6].lower()] = value
            else:
                found.pop(name[:-6].lower(), None)
    return found


def _bypass(host: str, port: int, no_proxy: str | None) -> bool:
    """urllib.request.proxy_bypass_environment's rules: `*`, host or domain suffix, host:port."""
    if not no_proxy:
        return False
    if no_proxy.strip() == "*":
        return True
    host = host.lower()
    names = (host, _hostport(host, port), f"[{host}]") if ":" in host else (host, _hostport(host, port))
    for entry in no_proxy.split(","):
        suffix = entry.strip().lstrip(".").lower()
        if suffix and any(n == suffix or n.endswith("." + suffix) for n in names):
            return True
    return False


def _parse_proxy(url: str, source: str, upstream: Upstream) -> ProxyEndpoint:
    """http(s)://[user:pass@]host[:port]; a URL without a scheme is http, as urllib reads it."""
    parts = urlsplit(url.strip() if "://" in url else f"http://{url.strip()}")
    try:
        port = parts.port
    except ValueError:
        port = -1
    # The URL itself is never quoted back: it may hold a password.
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname or port == -1:
        raise ConfigError(f"upstream {upstream.name}: {source} is not an http(s)://[user:pass@]host:port URL")
    tls = parts.scheme.lower() == "https"
    authorization = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        authorization = "Basic " + base64.b64encode(pair).decode("ascii")
    # The proxy is trusted as the upstream is; the client certificate is the upstream's only.
    context = _trust(upstream) if tls else None
    return ProxyEndpoint(tls=tls, host=parts.hostname, port=port or (443 if tls else 80),
                         authorization=authorization, ssl=context)

