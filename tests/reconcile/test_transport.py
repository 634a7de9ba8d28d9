"""The admin key goes to the configured API only: never on through a redirect, never over plain http."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from proxy.reconcile.fetch import ReconcileError, urllib_transport


class _Seen:
    keys: ClassVar[list[str | None]] = []


def _server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _Target(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        _Seen.keys.append(self.headers.get("authorization"))
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def target() -> Iterator[str]:
    _Seen.keys = []
    yield from _server(_Target)


def test_a_redirect_is_an_answer_not_followed(target: str) -> None:
    class Redirect(_Target):
        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("location", f"{target}/elsewhere")
            self.send_header("content-length", "0")
            self.end_headers()

    for base in _server(Redirect):
        status, _ = urllib_transport(f"{base}/v1/organization/costs", {"Authorization": "Bearer sk-admin-x"})
        assert status == 302
    assert _Seen.keys == []  # the key never reached the redirect's target


def test_the_key_is_sent_over_https_only_off_this_machine() -> None:
    with pytest.raises(ReconcileError, match="only sent over https"):
        urllib_transport("http://api.example.com/v1/organization/costs", {"Authorization": "Bearer sk-admin-x"})


def test_a_page_past_the_limit_is_refused_not_held(target: str) -> None:
    class Endless(_Target):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()  # no length: the body runs until the connection ends
            self.wfile.write(b"{" + b" " * 4096)

    for base in _server(Endless):
        with pytest.raises(ReconcileError, match="a page longer than 1,024 bytes"):
            urllib_transport(f"{base}/v1/organization/costs", {}, limit=1024)
