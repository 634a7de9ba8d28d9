"""Egress (proxy/upstream/egress.py) against real sockets on 127.0.0.1: a TLS upstream with its
own CA, a CONNECT proxy, each on asyncio's default loop and on uvloop (production's)."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import socket
import ssl
import urllib.request
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvloop

from proxy.errors import ConfigError, Unreachable
from proxy.settings import Upstream
from proxy.upstream import egress
from proxy.upstream.egress import Route, open_connection, route_for
from tests.upstream.egress_servers import ConnectProxy, Pki, SaysHttp, TlsServer, dead_port, make_pki

T = TypeVar("T")
Run = Callable[[Coroutine[Any, Any, T]], T]
API = "api.example.test"
BASIC = "Basic " + base64.b64encode(b"meter:s3cret").decode()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Iterator[Run[Any]]:
    factory = uvloop.new_event_loop if request.param == "uvloop" else asyncio.new_event_loop

    def go(coro: Coroutine[Any, Any, T]) -> T:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(asyncio.wait_for(coro, 20))

    yield go


def upstream(**kw: Any) -> Upstream:
    return Upstream(name="up", base_url="https://unused", **kw)


def named(route: Route, port: int) -> Route:
    """A route for api.example.test connecting to 127.0.0.1: no DNS in tests."""
    return dataclasses.replace(route, connect_host="127.0.0.1", port=port)


class Fetch(asyncio.Protocol):
    """Sends one GET once connected, keeps the answer, resolves `done` with connection_lost's error."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.done: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self.data += data

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(exc)


async def get(route: Route, path: str = "/v1/models", timeout: float = 5.0) -> bytes:
    transport, fetch = await open_connection(route, Fetch, timeout)
    name = f"[{route.host}]" if ":" in route.host else route.host
    host = f"{name}:{route.port}"
    target = f"{'https' if route.tls else 'http'}://{host}{path}" if route.absolute_form else path
    extra = "".join(f"{k}: {v}\r\n" for k, v in route.proxy_headers)
    transport.write(f"GET {target} HTTP/1.1\r\nhost: {host}\r\n{extra}connection: close\r\n\r\n".encode())
    exc = await fetch.done
    if isinstance(exc, OSError):
        raise egress.unreachable(route, exc)
    return bytes(fetch.data)


async def failure(route: Route) -> str:
    """Why the route fails: at connecting or, for what TLS 1.3 reports late, at the first read."""
    with pytest.raises(Unreachable) as caught:
        await get(route)
    return str(caught.value)


# --- direct TLS: trust, names, client certificates -------------------------------------------


def test_direct_tls_with_ca_file(run: Run[Any], pki: Pki) -> None:
    async def main() -> bytes:
        async with TlsServer(pki.server) as tls:
            route = route_for(upstream(ca_file=pki.ca), f"https://127.0.0.1:{tls.port}", env={})
            assert route.proxy is None and route.ssl is not None
            return await get(route)

    assert run(main()).endswith(b"hello from tls")


def test_bytes_right_after_the_handshake_reach_the_callers_protocol(run: Run[Any], pki: Pki) -> None:
    async def main() -> tuple[bytes, Exception | None]:
        async with TlsServer(pki.server, greeting=b"220 first") as tls:
            route = route_for(upstream(ca_file=pki.ca), f"https://127.0.0.1:{tls.port}", env={})
            _, fetch = await open_connection(route, Fetch, 5)
            exc = await fetch.done
            return bytes(fetch.data), exc

    assert run(main()) == (b"220 first", None)


def test_system_store_does_not_trust_a_private_ca(run: Run[Any], pki: Pki) -> None:
    async def main() -> str:
        async with TlsServer(pki.server) as tls:
            return await failure(route_for(upstream(), f"https://127.0.0.1:{tls.port}", env={}))

    message = run(main())
    assert "certificate of 127.0.0.1" in message and "not trusted" in message and "system store" in message
    assert "unable to get local issuer certificate" in message or "self-signed certificate" in message


def test_hostname_mismatch_is_named(run: Run[Any], pki: Pki) -> None:
    async def main() -> str:
        async with TlsServer(pki.other) as tls:
            return await failure(named(route_for(upstream(ca_file=pki.ca), f"https://{API}", env={}), tls.port))

    message = run(main())
    assert f"Hostname mismatch, certificate is not valid for '{API}'" in message
    assert "not for that name" in message


def test_mutual_tls_with_client_cert(run: Run[Any], pki: Pki) -> None:
    async def main() -> bytes:
        async with TlsServer(pki.server, client_ca=pki.ca) as tls:
            up = upstream(ca_file=pki.ca, client_cert=pki.client[0], client_key=pki.client[1])
            return await get(route_for(up, f"https://127.0.0.1:{tls.port}", env={}))

    assert run(main()).endswith(b"hello from tls to llmmeter-client")


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_mutual_tls_without_client_cert_says_so(run: Run[Any], pki: Pki, version: ssl.TLSVersion) -> None:
    async def main() -> str:
        async with TlsServer(pki.server, client_ca=pki.ca, max_version=version) as tls:
            return await failure(route_for(upstream(ca_file=pki.ca), f"https://127.0.0.1:{tls.port}", env={}))

    message = run(main())
    # TLS 1.3 names the missing certificate; OpenSSL's TLS 1.2 server only says "handshake failure".
    assert "requires a client certificate" in message or "no client certificate is configured" in message


def test_client_cert_from_another_ca_is_rejected(run: Run[Any], pki: Pki) -> None:
    async def main() -> str:
        async with TlsServer(pki.server, client_ca=pki.ca) as tls:
            up = upstream(ca_file=pki.ca, client_cert=pki.rogue_client[0], client_key=pki.rogue_client[1])
            return await failure(route_for(up, f"https://127.0.0.1:{tls.port}", env={}))

    assert "127.0.0.1" in (message := run(main())) and "rejected the client certificate" in message


def test_tls_to_a_plain_http_port(run: Run[Any], pki: Pki) -> None:
    async def main() -> str:
        async with SaysHttp() as plain:
            return await failure(route_for(upstream(ca_file=pki.ca), f"https://127.0.0.1:{plain.port}", env={}))

    assert "TLS handshake with 127.0.0.1" in (message := run(main())) and "failed" in message


def test_refused_and_dns_failures_are_named(run: Run[Any], pki: Pki) -> None:
    port = dead_port()
    message = run(failure(route_for(upstream(), f"https://127.0.0.1:{port}", env={})))
    assert message == f"https://127.0.0.1:{port}: cannot connect to 127.0.0.1:{port}: connection refused"
    # No lookup of a name in tests: the message for the error getaddrinfo raises.
    route = route_for(upstream(), f"https://{API}", env={})
    dns = egress.unreachable(route, socket.gaierror(socket.EAI_NONAME, "Name or service not known"))
    assert str(dns) == f"https://{API}:443: cannot resolve {API} (Name or service not known)"


# --- through a CONNECT proxy ----------------------------------------------------------------


def test_https_proxy_from_environment_tunnels(run: Run[Any], pki: Pki) -> None:
    async def main() -> None:
        async with TlsServer(pki.server) as tls, ConnectProxy(auth=BASIC) as proxy:
            env = {"HTTPS_PROXY": f"http://meter:s3cret@127.0.0.1:{proxy.port}", "NO_PROXY": "other.test"}
            route = route_for(upstream(ca_file=pki.ca), f"https://{API}:{tls.port}", env=env)
            assert route.proxy is not None and not route.absolute_form and route.proxy_headers == ()
            assert route.describe() == f"https://{API}:{tls.port} via proxy 127.0.0.1:{proxy.port}"
            assert "s3cret" not in repr(route) and "s3cret" not in route.describe()
            assert (await get(route)).endswith(b"hello from tls")
            assert [(s.method, s.target) for s in proxy.seen] == [("CONNECT", f"{API}:{tls.port}")]
            assert proxy.seen[0].headers["host"] == f"{API}:{tls.port}"
            assert proxy.tunnels == 1

    run(main())


def test_tls_inside_an_https_proxy(run: Run[Any], pki: Pki) -> None:
    async def main() -> None:
        async with TlsServer(pki.server) as tls, ConnectProxy(tls=pki.server) as proxy:
            up = upstream(ca_file=pki.ca, proxy=f"https://127.0.0.1:{proxy.port}")
            route = route_for(up, f"https://{API}:{tls.port}", env={})
            assert (await get(route)).endswith(b"hello from tls") and proxy.tunnels == 1

    run(main())


def test_no_proxy_goes_direct(run: Run[Any], pki: Pki) -> None:
    async def main() -> None:
        async with TlsServer(pki.server) as tls, ConnectProxy() as proxy:
            env = {"https_proxy": f"http://127.0.0.1:{proxy.port}", "no_proxy": "localhost, 127.0.0.1"}
            route = route_for(upstream(ca_file=pki.ca), f"https://127.0.0.1:{tls.port}", env=env)
            assert route.proxy is None
            assert (await get(route)).endswith(b"hello from tls") and proxy.seen == []

    run(main())


def test_proxy_none_ignores_the_environment(run: Run[Any], pki: Pki) -> None:
    async def main() -> None:
        async with TlsServer(pki.server) as tls, ConnectProxy() as proxy:
            env = {"HTTPS_PROXY": f"http://127.0.0.1:{proxy.port}"}
            route = route_for(upstream(ca_file=pki.ca, proxy="none"), f"https://127.0.0.1:{tls.port}", env=env)
            assert route.proxy is None
            assert (await get(route)).endswith(b"hello from tls") and proxy.seen == []

    run(main())


def test_upstream_proxy_overrides_the_environment(run: Run[Any], pki: Pki) -> None:
    async def main() -> None:
        async with TlsServer(pki.server) as tls, ConnectProxy() as proxy:
            env = {"HTTPS_PROXY": f"http://127.0.0.1:{dead_port()}", "NO_PROXY": "*"}
            up = upstream(ca_file=pki.ca, proxy=f"http://127.0.0.1:{proxy.port}")
            route = route_for(up, f"https://{API}:{tls.port}", env=env)
            assert route.proxy is not None and route.proxy.port == proxy.port
            assert (await get(route)).endswith(b"hello from tls") and proxy.tunnels == 1

    run(main())


def test_plain_http_goes_to_the_proxy_in_absolute_form(run: Run[Any]) -> None:
    async def main() -> None:
        async with ConnectProxy(auth=BASIC) as proxy:
            env = {"HTTP_PROXY": f"http://meter:s3cret@127.0.0.1:{proxy.port}", "HTTPS_PROXY": "http://127.0.0.1:1"}
            route = route_for(upstream(), f"http://{API}:8080", env=env)
            assert route.absolute_form and route.ssl is None
            assert route.proxy_headers == (("proxy-authorization", BASIC),)
            answer = await get(route)
            assert answer.endswith(f"proxied GET http://{API}:8080/v1/models".encode())
            assert proxy.seen[0].headers["host"] == f"{API}:8080" and proxy.tunnels == 0

    run(main())


@pytest.mark.parametrize(("proxy_kw", "userinfo", "status"), [
    ({"auth": BASIC}, "", "407 Proxy Authentication Required"),
    ({"auth": BASIC}, "meter:wrong@", "407 Proxy Authentication Required"),
    ({"reply": b"HTTP/1.1 403 Forbidden\r\ncontent-length: 5\r\n\r\nnope!"}, "", "403 Forbidden"),
])
def test_proxy_refusing_connect_is_named(run: Run[Any], pki: Pki, proxy_kw: dict[str, Any], userinfo: str,
                                         status: str) -> None:
    async def main() -> str:
        async with ConnectProxy(**proxy_kw) as proxy:
            up = upstream(ca_file=pki.ca, proxy=f"http://{userinfo}127.0.0.1:{proxy.port}")
            return await failure(route_for(up, f"https://{API}:9443", env={}))

    message = run(main())
    assert f"egress proxy answered {status} to CONNECT {API}:9443" in message
    assert "wrong" not in message and "meter" not in message


def test_proxy_down_is_named(run: Run[Any], pki: Pki) -> None:
    port = dead_port()
    route = route_for(upstream(proxy=f"http://meter:s3cret@127.0.0.1:{port}"), f"https://{API}", env={})
    message = run(failure(route))
    assert message.endswith(f"cannot connect to the egress proxy 127.0.0.1:{port}: connection refused")
    assert "s3cret" not in message


def test_connect_answer_timeout(run: Run[Any]) -> None:
    async def main() -> str:
        async with ConnectProxy(silent=True) as proxy:
            route = route_for(upstream(proxy=f"http://127.0.0.1:{proxy.port}"), f"https://{API}", env={})
            with pytest.raises(TimeoutError) as caught:
                await open_connection(route, asyncio.Protocol, 0.3)
            return str(caught.value)

    assert "answer to CONNECT took over 0.3s" in run(main())


@pytest.mark.parametrize(("reply", "why"), [
    (b"HTTP/1.1 200 Connection established\r\n\r\n\x16\x03\x01 early", "sent 9 bytes after its answer"),
    (b"HTTP/1.1 200 OK\r\n" + b"x-pad: " + b"a" * 17000, "answer head over 16384 bytes"),
    (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "with something not HTTP"),
    (b"HTTP/1.1 200 OK\r\n", "closed the connection without an answer"),
])
def test_bad_connect_answers(run: Run[Any], reply: bytes, why: str) -> None:
    async def main() -> str:
        async with ConnectProxy(reply=reply) as proxy:
            route = route_for(upstream(proxy=f"http://127.0.0.1:{proxy.port}"), f"https://{API}", env={})
            return await failure(route)

    assert why in run(main())


# --- route_for alone: no sockets ------------------------------------------------------------


def test_ipv6_zone_id_is_kept_for_connecting_only() -> None:
    route = route_for(upstream(), "http://[fe80::1%25eth0]:8080", env={})
    assert (route.host, route.connect_host, route.port) == ("fe80::1", "fe80::1%eth0", 8080)
    assert route.describe() == "http://[fe80::1]:8080"


@pytest.mark.parametrize(("no_proxy", "host", "port"), [
    ("*", API, 443), ("example.test", API, 443), (".example.test", API, 443), ("EXAMPLE.test", API, 443),
    ("api.example.test:443", API, 443), ("api.example.test:8443", API, 443), ("xample.test", API, 443),
    ("other.test, api.example.test", API, 8443), ("", API, 443), ("::1", "::1", 443),
])
def test_no_proxy_follows_urllib(no_proxy: str, host: str, port: int) -> None:
    env = {"HTTPS_PROXY": "http://127.0.0.1:3128", "NO_PROXY": no_proxy}
    name = f"[{host}]" if ":" in host else host
    route = route_for(upstream(), f"https://{name}:{port}", env=env)
    expected = urllib.request.proxy_bypass_environment(f"{host}:{port}", {"no": no_proxy})  # type: ignore[attr-defined]
    assert (route.proxy is None) == expected


@pytest.mark.parametrize(("env", "proxy_port"), [
    ({"HTTPS_PROXY": "http://127.0.0.1:1", "https_proxy": "http://127.0.0.1:2"}, 2),  # lower case wins
    ({"HTTPS_PROXY": "http://127.0.0.1:1", "https_proxy": ""}, None),  # an empty lower-case one unsets
    ({"HTTP_PROXY": "http://127.0.0.1:1"}, None),  # http's proxy is not https's
    ({"HTTPS_PROXY": "127.0.0.1:3"}, 3),  # no scheme: http://
])
def test_environment_like_urllib(env: dict[str, str], proxy_port: int | None) -> None:
    route = route_for(upstream(), f"https://{API}", env=env)
    assert (route.proxy.port if route.proxy else None) == proxy_port


def test_cgi_ignores_upper_case_http_proxy() -> None:
    env = {"HTTP_PROXY": "http://127.0.0.1:1", "REQUEST_METHOD": "GET"}
    assert route_for(upstream(), f"http://{API}", env=env).proxy is None


def test_bad_settings_are_config_errors(tmp_path: Path, pki: Pki) -> None:
    with pytest.raises(ConfigError, match="ca_file"):
        route_for(upstream(ca_file=tmp_path / "missing.pem"), f"https://{API}", env={})
    with pytest.raises(ConfigError, match="client_cert"):
        route_for(upstream(client_cert=pki.client[0], client_key=pki.rogue_client[1]), f"https://{API}", env={})
    with pytest.raises(ConfigError) as caught:
        route_for(upstream(proxy="socks5://meter:s3cret@127.0.0.1:1080"), f"https://{API}", env={})
    assert "upstream.proxy" in str(caught.value) and "s3cret" not in str(caught.value)


def test_what_tls_delivers_before_the_hand_over_is_replayed() -> None:
    """Neither loop delivers data before start_tls returns today; the holder must not lose it if one does."""

    class Transport(asyncio.Transport):
        def __init__(self) -> None:
            super().__init__()
            self.protocol: asyncio.BaseProtocol | None = None
            self.closed = False

        def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
            self.protocol = protocol

        def close(self) -> None:
            self.closed = True

    class Collect(asyncio.Protocol):
        def __init__(self) -> None:
            self.events: list[object] = []

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.events.append("made")

        def data_received(self, data: bytes) -> None:
            self.events.append(data)

        def eof_received(self) -> bool | None:
            self.events.append("eof")
            return None

        def connection_lost(self, exc: Exception | None) -> None:
            self.events.append(("lost", exc))

    async def main() -> None:
        holder = egress._Holder(asyncio.get_running_loop())
        holder.data_received(b"early ")
        holder.data_received(b"bytes")
        assert holder.eof_received() is None
        transport, collect = Transport(), Collect()
        holder.hand_over(transport, collect)
        holder.connection_lost(None)  # scheduled on the holder before set_protocol: forwarded
        assert transport.protocol is collect and transport.closed
        assert collect.events == ["made", b"early ", b"bytes", "eof", ("lost", None)]

    asyncio.run(main())
