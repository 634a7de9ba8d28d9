"""An upstream over HTTPS, as every provider API is: certificates are verified, and metering works.

A throwaway CA (made with the openssl command) signs a certificate for 127.0.0.1; the fake
upstream serves TLS with it. llmmeter trusts that CA only through SSL_CERT_FILE, so the
same upstream without it must be refused as unreachable, never silently trusted.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from openai import OpenAI

from tests.fake_upstream import FakeUpstream
from tests.serve import free_port
from tests.strict import require
from tests.upstream.egress_servers import ConnectProxy, dead_port

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
    # The client and the log say why: the certificate, not just "unreachable" (issue: egress).
    message = str(getattr(e.value, "message", e.value))
    assert "not trusted" in message and "certificate" in message, message
    assert "not trusted" in proxy.output()


@pytest.fixture
def connect_proxy() -> Iterator[ConnectProxy]:
    """An HTTP CONNECT proxy on 127.0.0.1, on an event loop of its own."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    proxy = ConnectProxy(auth="Basic " + base64.b64encode(b"me:secret").decode())
    asyncio.run_coroutine_threadsafe(proxy.__aenter__(), loop).result(10)
    yield proxy

    async def shutdown() -> None:
        await proxy.__aexit__(None, None, None)
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run_coroutine_threadsafe(shutdown(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def test_ca_file_trusts_a_private_ca_and_https_proxy_carries_it(tls_upstream: tuple[str, Path], serve: Any,
                                                                connect_proxy: ConnectProxy) -> None:
    base_url, ca = tls_upstream
    config = f'[[upstream]]\nname = "private"\nbase_url = "{base_url}"\nca_file = "{ca}"\n'
    direct = serve(config=config)
    client = OpenAI(base_url=direct.base_url, api_key="k", max_retries=0)
    msgs = [{"role": "user", "content": "hi"}]
    assert client.chat.completions.create(model="kimi-k3.1-pro", messages=msgs).usage is not None  # type: ignore[arg-type]
    assert connect_proxy.tunnels == 0
    # The same upstream through an egress proxy named by HTTPS_PROXY: a CONNECT tunnel, TLS inside it.
    proxied = serve(config=config, env={"HTTPS_PROXY": f"http://me:secret@127.0.0.1:{connect_proxy.port}"})
    client = OpenAI(base_url=proxied.base_url, api_key="k", max_retries=0)
    for _ in range(2):  # the tunnelled connection is kept alive and reused
        r = client.chat.completions.create(model="kimi-k3.1-pro", messages=msgs, extra_headers={  # type: ignore[arg-type]
            "x-fake-usage": json.dumps(USAGE)})
        assert r.usage is not None and r.usage.prompt_tokens == 1200
    port = base_url.split(":")[2].split("/")[0]
    assert connect_proxy.tunnels == 1 and [s.target for s in connect_proxy.seen] == [f"127.0.0.1:{port}"]
    assert [(row["outcome"], row["cache_read_tokens"]) for row in proxied.rows(expect=2)] == [("ok", 1000)] * 2
    assert "secret" not in proxied.output()
    # upstream.proxy = "none" ignores the environment.
    bypass = serve(config=config + 'proxy = "none"\n', env={"HTTPS_PROXY": f"http://127.0.0.1:{connect_proxy.port}"})
    client = OpenAI(base_url=bypass.base_url, api_key="k", max_retries=0)
    assert client.chat.completions.create(model="kimi-k3.1-pro", messages=msgs).usage is not None  # type: ignore[arg-type]
    assert connect_proxy.tunnels == 1


def test_a_502_says_what_failed_not_where(tls_upstream: tuple[str, Path], serve: Any, tmp_path: Path,
                                          connect_proxy: ConnectProxy) -> None:
    """The upstream's address, the egress proxy's and the ca_file path stay in the log: any client
    can read a 502's body (SECURITY.md)."""
    base_url, _ = tls_upstream
    tls_port = base_url.split(":")[2].split("/")[0]
    other_ca = tmp_path / "private-bundle-4711.pem"  # trusts another CA than the upstream's
    (tmp_path / "other").mkdir()
    _certs(tmp_path / "other")[0].rename(other_ca)
    dead = dead_port()
    config = (f'[[upstream]]\nname = "untrusted"\nbase_url = "{base_url}"\nca_file = "{other_ca}"\n'
              'models = ["kimi-*"]\n'
              '[[upstream]]\nname = "egress"\nbase_url = "https://llm.internal.example:9443/v1"\n'
              f'proxy = "http://127.0.0.1:{connect_proxy.port}"\nmodels = ["gpt-*"]\n'
              f'[[upstream]]\nname = "down"\nbase_url = "http://127.0.0.1:{dead}/v1"\nmodels = ["deepseek-*"]\n')
    proxy = serve(config=config)
    bodies = {}
    for model in ("kimi-k3.1-pro", "gpt-test", "deepseek-test"):
        r = httpx.post(proxy.base_url + "/chat/completions", timeout=20,
                       json={"model": model, "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_unreachable", r.text
        bodies[model] = r.text
    assert "not trusted" in bodies["kimi-k3.1-pro"]  # what failed is still said
    assert "407" in bodies["gpt-test"] and "refused" in bodies["deepseek-test"]
    secrets = ("127.0.0.1", tls_port, str(connect_proxy.port), str(dead), "llm.internal.example", "4711",
               str(tmp_path))
    for model, body in bodies.items():
        assert not [s for s in secrets if s in body], (model, body)
    log = proxy.output()  # where it failed is the operator's to read
    assert str(other_ca) in log and "llm.internal.example:9443" in log and f"127.0.0.1:{dead}" in log
