"""What llmmeter promises in SECURITY.md, checked against real processes."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from openai import OpenAI

from tests.fake_upstream import FakeUpstream
from tests.faults.helpers import get, listen_address, raw_http, status_of, wait_until
from tests.serve import free_port
from tests.strict import require

CHAT = {"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def evil() -> Iterator[FakeUpstream]:
    """A second server a client would like the proxy to reach: it must never get a request."""
    with FakeUpstream() as upstream:
        yield upstream


# --- metrics token ---------------------------------------------------------------------

def test_metrics_token_guards_metrics_and_nothing_else(fake: FakeUpstream, serve: Any) -> None:
    token = "mt-" + secrets.token_hex(8)
    proxy = serve(upstream=fake.base_url, env={"LLMMETER_METRICS_TOKEN": token})
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": token},
                    {"authorization": f"Basic {token}"}, {"authorization": f"Bearer {token}x"},
                    {"x-api-key": token}):
        r = httpx.get(proxy.url + "/metrics", headers=headers)
        assert r.status_code == 401, headers
        assert r.json()["error"]["type"] == "authentication_error" and token not in r.text
    ok = httpx.get(proxy.url + "/metrics", headers={"authorization": f"Bearer {token}"})
    assert ok.status_code == 200 and "llmmeter_requests_total" in ok.text
    # Probes and the API itself never need it (SPEC "Tenants").
    assert httpx.get(proxy.url + "/healthz").status_code == 200
    assert httpx.get(proxy.url + "/readyz").status_code == 200
    assert httpx.post(proxy.base_url + "/chat/completions", json=CHAT).status_code == 200
    assert "authorization" not in fake.requests[-1]["headers"]  # nor is it sent upstream
    # No other admin surface is exposed.
    for path in ("/docs", "/redoc", "/openapi.json", "/admin"):
        assert httpx.get(proxy.url + path).status_code == 404, path
    assert token not in proxy.output()


def test_prometheus_scrapes_with_the_bearer_token(fake: FakeUpstream, serve: Any, tmp_path: Path) -> None:
    binary = shutil.which("prometheus")
    require(binary is not None, "the prometheus binary is not installed (Debian package prometheus)")
    assert binary is not None
    token = "mt-" + secrets.token_hex(8)
    proxy = serve(upstream=fake.base_url, config=f'[server]\nmetrics_token = "{token}"\n')
    port = free_port()
    (tmp_path / "prometheus.yml").write_text(f"""
global: {{scrape_interval: 1s, scrape_timeout: 900ms}}
scrape_configs:
  - job_name: right
    authorization: {{credentials: "{token}"}}
    static_configs: [{{targets: ["127.0.0.1:{proxy.port}"]}}]
  - job_name: wrong
    authorization: {{credentials: "not-the-token"}}
    static_configs: [{{targets: ["127.0.0.1:{proxy.port}"]}}]
""")
    log = (tmp_path / "prometheus.log").open("wb")
    prom = subprocess.Popen([binary, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        def up() -> dict[str, str]:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/api/v1/query", params={"query": "up"}, timeout=2)
                return {s["metric"]["job"]: s["value"][1] for s in r.json()["data"]["result"]}
            except (httpx.HTTPError, KeyError, ValueError):
                return {}
        assert wait_until(lambda: len(up()) == 2, timeout=60, every=0.5)
        assert up() == {"right": "1", "wrong": "0"}
    finally:
        prom.terminate()
        prom.wait(15)
        log.close()


# --- where it listens --------------------------------------------------------------------

def test_binds_to_loopback_unless_told_otherwise(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)  # no --host, no server.host
    assert listen_address(proxy.port) == "127.0.0.1"
    wide = serve(upstream=fake.base_url, args=("--host", "0.0.0.0"))
    assert listen_address(wide.port) == "0.0.0.0"


# --- no SSRF -----------------------------------------------------------------------------

def test_a_client_cannot_choose_the_upstream_host(fake: FakeUpstream, evil: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    there = f"127.0.0.1:{evil.port}"
    attempts = [
        get("/v1/models", host=there),
        get("/v1/models", extra=f"X-Forwarded-Host: {there}\r\nX-Forwarded-Proto: http\r\n"
                                f"Forwarded: host={there}\r\nX-Original-URL: http://{there}/v1/models\r\n"
                                f"X-LLMMeter-Upstream: http://{there}/v1\r\n".encode()),
        get(f"http://{there}/v1/models", host=there),  # absolute-form request target
        get(f"/v1/@{there}/v1/models"),
        get(f"/v1/%40{there}/v1/models"),
        get(f"/v1/http://{there}/v1/models"),
        get(f"/v1/\\\\{there}/v1/models"),
        get("/v1/../../v1/models"),
        get("/v1/%2e%2e/%2E%2E/v1/models"),
        get("/v1/models/..%2F..%2Fx"),
        get(f"//{there}/v1/models"),
        get(f"/v1//{there}/v1/models"),
    ]
    for req in attempts:
        res = raw_http(proxy.port, req)
        assert status_of(res) in (200, 400, 404), (req, res[:200])
    body = {**CHAT, "model": f"http://{there}/v1"}
    httpx.post(proxy.base_url + "/chat/completions", json=body, headers={"host": there})
    assert not evil.requests
    assert {r["headers"]["host"] for r in fake.requests} == {f"127.0.0.1:{fake.port}"}
    # Dot segments never travel, encoded or not: those were answered by the proxy itself.
    assert not [r for r in fake.requests if ".." in r["path"] or "%2e" in r["raw_path"].lower()]


@pytest.mark.parametrize("path", [
    "/v1/models/caf%C3%A9", "/v1/models/a%20b", "/v1/models%3Fx=1", "/v1/models/a%2Fb", "/v1/models/a%00b",
    "/v1/models/a%0D%0AX-Injected:%20yes",
])
def test_encoded_paths_travel_as_sent_and_cannot_split_the_request(path: str, fake: FakeUpstream,
                                                                   serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    res = raw_http(proxy.port, get(path + "?q=%20x"))
    assert status_of(res) == 404, res[:300]  # the fake upstream's own answer for an unknown model path
    [seen] = fake.requests  # one request upstream: nothing was smuggled after it
    assert seen["raw_path"] == path and seen["query"] == "q=%20x"
    assert "x-injected" not in seen["headers"] and seen["headers"]["host"] == f"127.0.0.1:{fake.port}"
    [row] = proxy.rows(expect=1)
    assert (row["endpoint"], row["code"]) == ("other", 404)


def test_a_path_that_names_a_known_one_once_cut_at_a_space_is_refused(fake: FakeUpstream, serve: Any) -> None:
    """Cut at its encoded space, this path is /v1/models followed by a second request: ambiguous,
    so it is refused, and nothing goes upstream."""
    proxy = serve(upstream=fake.base_url)
    res = raw_http(proxy.port, get("/v1/models%20HTTP/1.1%0D%0AHost:%20evil%0D%0A%0D%0AGET%20/v1/x?q=%20x"))
    assert status_of(res) == 400 and b"invalid_path" in res, res[:300]
    assert not fake.requests


# --- secrets stay out of logs ------------------------------------------------------------

def test_keys_are_in_no_log_line_whatever_fails(fake: FakeUpstream, serve: Any) -> None:
    upstream_key = "sk-up-" + secrets.token_hex(12)
    client_key = "sk-client-" + secrets.token_hex(12)
    anthropic_key = "sk-ant-" + secrets.token_hex(12)
    token = "mt-" + secrets.token_hex(8)
    dead = f"http://127.0.0.1:{free_port()}/v1"
    config = f"""
[server]
read_timeout_s = 1
metrics_token = "{token}"

[[upstream]]
name = "keyed"
base_url = "{fake.base_url}"
api_key_env = "KEYED_API_KEY"
models = ["kimi-*"]

[[upstream]]
name = "dead"
base_url = "{dead}"
api_key_env = "KEYED_API_KEY"
models = ["gone-*"]

[[upstream]]
name = "open"
base_url = "{fake.base_url}"
"""
    proxy = serve(config=config, env={"KEYED_API_KEY": upstream_key})
    auth = {"authorization": f"Bearer {client_key}", "x-api-key": anthropic_key}
    oa = OpenAI(base_url=proxy.base_url, api_key=client_key, max_retries=0, timeout=10)
    an = anthropic.Anthropic(base_url=proxy.url, api_key=anthropic_key, max_retries=0, timeout=10)
    msgs: Any = [{"role": "user", "content": "hi"}]
    oa.chat.completions.create(model="kimi-k3.1-pro", messages=msgs)
    oa.chat.completions.create(model="gpt-test", messages=msgs)  # "open": the client's key goes upstream
    an.messages.create(model="claude-test", max_tokens=5, messages=msgs)
    failures: list[tuple[str, dict[str, Any], dict[str, str]]] = [
        ("/chat/completions", {**CHAT, "model": "gone-1"}, {}),  # unreachable
        ("/chat/completions", CHAT, {"x-fake-hang": "1"}),  # read timeout
        ("/chat/completions", {**CHAT, "stream": True}, {"x-fake-reset-after": "2"}),  # reset mid-stream
        ("/chat/completions", CHAT, {"x-fake-status": "500"}),
        ("/messages", {"model": "claude-test", "max_tokens": 5, "messages": msgs}, {"x-fake-status": "529"}),
    ]
    for path, body, extra in failures:
        with contextlib.suppress(httpx.HTTPError):  # the reset one breaks the stream on purpose
            httpx.post(proxy.base_url + path, json=body, headers={**auth, **extra}, timeout=10)
    fake.release()
    httpx.post(proxy.base_url + "/chat/completions", content=b"{", headers=auth)
    raw_http(proxy.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
             + client_key.encode() + b"\r\nContent-Length: nope\r\n\r\n")
    httpx.get(proxy.url + "/metrics", headers={"authorization": f"Bearer {token}x"})
    proxy.rows(expect=9)
    sent = {r["headers"].get("authorization") for r in fake.requests}
    assert f"Bearer {upstream_key}" in sent and f"Bearer {client_key}" in sent  # keys really flowed
    proxy.stop()
    log = proxy.output()
    assert "Invalid HTTP request" in log  # the log was written to, failures included
    for secret in (upstream_key, client_key, anthropic_key, token):
        assert secret not in log
        assert secret[6:] not in log  # not even a truncated or re-prefixed form


# --- prompts and completions are never written ----------------------------------------------

def test_prompts_and_completions_are_written_nowhere(fake: FakeUpstream, serve: Any) -> None:
    prompt = "prompt" + secrets.token_hex(10)
    word = "reply" + secrets.token_hex(10)
    t0 = time.time() - 1
    proxy = serve(upstream=fake.base_url)
    client = OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    msgs: Any = [{"role": "user", "content": f"{prompt} please"}]
    headers = {"x-fake-word": word}
    seen = client.chat.completions.create(model="kimi-k3.1-pro", messages=msgs, extra_headers=headers)
    assert word in (seen.choices[0].message.content or "")  # the marker really went through
    # No usage from upstream: the proxy reads the texts to estimate, then forgets them.
    client.chat.completions.create(model="kimi-k3.1-pro", messages=msgs,
                                   extra_headers={**headers, "x-fake-no-usage": "1"})
    list(client.chat.completions.create(model="kimi-k3.1-pro", messages=msgs, stream=True,
                                        extra_headers={**headers, "x-fake-no-usage": "1"}))
    client.responses.create(model="kimi-k3.1-pro", input=f"{prompt} please", extra_headers=headers)
    client.embeddings.create(model="text-embedding-test", input=f"{prompt} please")
    anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0).messages.create(
        model="claude-test", max_tokens=5, messages=msgs, extra_headers=headers)
    with pytest.raises(Exception):  # noqa: B017 - whatever the SDK raises for a broken stream
        list(client.chat.completions.create(model="kimi-k3.1-pro", messages=msgs, stream=True,
                                            extra_headers={**headers, "x-fake-reset-after": "3"}))
    with httpx.stream("POST", proxy.base_url + "/chat/completions", json={**CHAT, "messages": msgs, "stream": True},
                      headers={**headers, "x-fake-chunks": "200", "x-fake-delay-ms": "20"}) as r:
        next(r.iter_raw())  # then leave: the partial completion is estimated
    assert wait_until(lambda: len(proxy.rows(timeout=0.2)) >= 8)
    proxy.kill()  # SIGKILL: whatever the journal still holds stays on disk to be searched
    written = [p for p in _files_written_since(t0) if p.stat().st_size < 256 * 1024 * 1024]
    mine = {p.name for p in written if proxy.tmp in p.parents}
    assert "ledger.db" in mine and any(n.endswith(".jsonl") for n in mine), mine  # the ledger and its journal
    for path in written:
        data = path.read_bytes()
        assert prompt.encode() not in data and word.encode() not in data, path


def _files_written_since(t0: float) -> list[Path]:
    """Every regular file under the temporary directory modified since t0 (the proxy's data lives there)."""
    found: list[Path] = []
    for root, _dirs, files in os.walk(tempfile.gettempdir()):
        for name in files:
            p = Path(root, name)
            try:
                if p.is_file() and not p.is_symlink() and p.stat().st_mtime >= t0:
                    found.append(p)
            except OSError:
                continue
    return found


def test_readyz_and_healthz_reveal_no_configuration(fake: FakeUpstream, serve: Any) -> None:
    key = "sk-up-" + secrets.token_hex(8)
    proxy = serve(upstream=fake.base_url, env={"LLMMETER_UPSTREAM_API_KEY": key})
    text = httpx.get(proxy.url + "/readyz").text + httpx.get(proxy.url + "/healthz").text
    assert key not in text and fake.base_url not in text and str(proxy.db) not in text
    assert json.loads(httpx.get(proxy.url + "/healthz").text) == {"status": "ok"}
