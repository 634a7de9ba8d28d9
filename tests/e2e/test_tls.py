"""An upstream over HTTPS, as every provider API is: certificates are verified, and metering works.

A throwaway CA (made with the openssl command) signs a certificate for 127.0.0.1; the fake
upstream serves TLS with it. llmmeter trusts that CA only through SSL_CERT_FILE, so the
same upstream without it must be refused as unreachable, never silently trusted.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from openai import OpenAI

from tests.fake_upstream import FakeUpstream
from tests.serve import free_port
from tests.strict import require

USAGE = {"prompt": 1200, "cached": 1000, "completion": 50}


def _certs(d: Path) -> tuple[Path, Path, Path]:
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=llmmeter test CA")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=127.0.0.1")
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "srv.pem",
        "-days", "2", "-extfile", "ext.cnf")
    return d / "ca.pem", d / "srv.key", d / "srv.pem"


@pytest.fixture
def tls_upstream(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    require(shutil.which("openssl") is not None, "the openssl command is missing (Debian package openssl)")
    ca, key, cert = _certs(tmp_path)
    fake, port = FakeUpstream(), free_port()
    server = uvicorn.Server(uvicorn.Config(fake.app, host="127.0.0.1", port=port, ssl_keyfile=str(key),
                                           ssl_certfile=str(cert), lifespan="off", interface="asgi3",
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.started
    yield f"https://127.0.0.1:{port}/v1", ca
    server.should_exit = True
    thread.join(5)


def test_https_upstream_is_verified_and_metered(tls_upstream: tuple[str, Path], serve: Any) -> None:
    base_url, ca = tls_upstream
    proxy = serve(upstream=base_url, env={"SSL_CERT_FILE": str(ca)})
    client = OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    headers = {"x-fake-usage": json.dumps(USAGE)}
    msgs = [{"role": "user", "content": "hi"}]
    for _ in range(3):  # a kept-alive TLS connection is reused
        r = client.chat.completions.create(model="kimi-k3.1-pro", messages=msgs, extra_headers=headers)  # type: ignore[arg-type]
        assert r.usage is not None and r.usage.prompt_tokens == 1200
    chunks = list(client.chat.completions.create(model="kimi-k3.1-pro", messages=msgs, stream=True,  # type: ignore[arg-type]
                                                 extra_headers=headers))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).startswith("tok0")
    rows = proxy.rows(expect=4)
    assert [(r["outcome"], r["input_tokens"], r["cache_read_tokens"], r["output_tokens"]) for r in rows] == \
        [("ok", 200, 1000, 50)] * 4
    assert proxy.metric("llmmeter_tokens_total", type="cache_read") == 4000


def test_an_untrusted_certificate_is_refused(tls_upstream: tuple[str, Path], serve: Any) -> None:
    base_url, _ = tls_upstream
    proxy = serve(upstream=base_url)  # the test CA is not trusted here
    client = OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    with pytest.raises(Exception) as e:
        client.chat.completions.create(model="kimi-k3.1-pro", messages=[{"role": "user", "content": "hi"}])
    assert getattr(e.value, "status_code", None) == 502
    [row] = proxy.rows(expect=1)
    assert row["outcome"] == "upstream_unreachable"
