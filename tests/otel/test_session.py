"""A collector's answer is read up to a bound (proxy/otel/session.py): a broken or hostile
collector that answers an export with an endless body cannot grow llmmeter's memory."""

from __future__ import annotations

import importlib.util
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.fake_upstream import FakeUpstream
from tests.otel.test_export import FAST_EXPORT, OTEL_MODULES
from tests.strict import require

CHUNK = 1 << 20
GIVE_UP = 64 * CHUNK  # the collector stops after this much per answer (and then closes)


class EndlessCollector:
    """Answers every export 200 with a chunked body of up to GIVE_UP bytes, as fast as it is read,
    and keeps how many bytes of each answer were taken."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.sent: list[int] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        sent = 0
        chunk = b"%x\r\n%s\r\n" % (CHUNK, b"\0" * CHUNK)
        with conn:
            try:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\n"
                             b"transfer-encoding: chunked\r\n\r\n")
                while sent < GIVE_UP:
                    conn.sendall(chunk)
                    sent += CHUNK
            except OSError:
                pass
        with self.lock:
            self.sent.append(sent)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def collector() -> Iterator[EndlessCollector]:
    require(all(importlib.util.find_spec(m) is not None for m in OTEL_MODULES),
            "the otel extra is not installed (pip install 'llmmeter[otel]')")
    c = EndlessCollector()
    yield c
    c.close()


def test_a_collector_answering_an_endless_body_is_cut_off(fake: FakeUpstream, serve: Any,
                                                          collector: EndlessCollector) -> None:
    proxy = serve(upstream=fake.base_url, config=f'[otel]\nendpoint = "{collector.url}"\n', env=FAST_EXPORT)
    body = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(proxy.base_url + "/chat/completions", json=body, timeout=30).status_code == 200
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not collector.sent:  # an answer llmmeter stopped reading
        time.sleep(0.02)
    assert collector.sent, proxy.output()
    # llmmeter read what an answer may hold and hung up; the rest never left the collector's buffers.
    assert max(collector.sent) < 16 * CHUNK, (collector.sent, proxy.output())
    assert "exceeds" in proxy.output()
