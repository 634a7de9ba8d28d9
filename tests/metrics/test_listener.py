"""The /metrics listener (`server.metrics_bind`) keeps the server's configured limits."""

from __future__ import annotations

import socket
import time
from typing import Any

from tests.fake_upstream import FakeUpstream
from tests.serve import free_port


def test_metrics_listener_drops_a_slow_head_at_the_configured_head_timeout(fake: FakeUpstream, serve: Any) -> None:
    # A client trickling a request head must not hold a connection to the metrics port (and a file
    # descriptor of the process that relays /v1) longer than server.head_timeout_s, as on the main port.
    port = free_port()
    proxy = serve(upstream=fake.base_url,
                  config=f'[server]\nmetrics_bind = "127.0.0.1:{port}"\nhead_timeout_s = 1\n')
    for target in (proxy.port, port):
        with socket.create_connection(("127.0.0.1", target)) as s:
            s.settimeout(20)  # the protocol's default head timeout is 30 s: a bound, not a wait
            s.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")  # the head never ends
            started = time.monotonic()
            answer = s.recv(200)
            assert answer.startswith(b"HTTP/1.1 408"), (target, answer)
            assert time.monotonic() - started < 15, target
