"""The upstream client's request bytes: what a Host header and a request target may carry."""

from __future__ import annotations

import pytest

from proxy.settings import Upstream
from proxy.upstream.client import _Origin, _request_bytes
from proxy.upstream.egress import route_for


def origin(base_url: str, env: dict[str, str] | None = None, **kw: object) -> _Origin:
    up = Upstream(name="u", base_url=base_url, **kw)  # type: ignore[arg-type]
    scheme, rest = base_url.split("://", 1)
    return _Origin(route_for(up, scheme + "://" + rest.split("/", 1)[0], env or {}))


@pytest.mark.parametrize("base_url, host", [
    ("http://[fe80::1%25eth0]:8080/v1", b"[fe80::1]:8080"),  # a zone id is local to this host
    ("http://[::1]/v1", b"[::1]"),
    ("https://api.example.test/v1", b"api.example.test"),
    ("https://api.example.test:8443/v1", b"api.example.test:8443"),
    ("http://bücher.example/v1", b"xn--bcher-kva.example"),
])
def test_the_host_header_names_the_origin_and_nothing_else(base_url: str, host: str) -> None:
    data = _request_bytes(origin(base_url), "GET", "/v1/models", [("accept", "*/*")], b"")
    assert data.split(b"\r\n")[:2] == [b"GET /v1/models HTTP/1.1", b"host: " + host]


def test_plain_http_through_a_proxy_uses_the_absolute_form() -> None:
    o = origin("http://127.0.0.1:9/v1", env={"HTTP_PROXY": "http://me:pw@127.0.0.1:3128"})
    data = _request_bytes(o, "POST", "/v1/chat/completions", [], b"{}")
    lines = data.split(b"\r\n")
    assert lines[0] == b"POST http://127.0.0.1:9/v1/chat/completions HTTP/1.1"
    assert any(line.lower().startswith(b"proxy-authorization: basic ") for line in lines)


@pytest.mark.parametrize("headers, target", [
    ([("x-a", "b\r\nx-smuggled: 1")], "/v1/models"),
    ([("x-a\r\nx-b", "c")], "/v1/models"),
    ([], "/v1/models HTTP/1.1\r\nx: y"),
    ([], "/v1/mo dels"),
])
def test_a_line_break_in_a_header_or_the_target_is_refused(headers: list[tuple[str, str]], target: str) -> None:
    with pytest.raises(ValueError, match="line break"):
        _request_bytes(origin("http://127.0.0.1:9/v1"), "GET", target, headers, b"")
