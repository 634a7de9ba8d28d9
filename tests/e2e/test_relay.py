"""Transparent relay: statuses, headers, bodies, streaming, keys and the proxy's own errors."""

from __future__ import annotations

import gzip
import json
import threading
import time
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.fake_upstream import FakeUpstream
from tests.serve import free_port

CHAT = {"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": "hi"}]}


def test_first_chunk_arrives_while_upstream_is_still_sending(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    got_first = threading.Event()
    with httpx.stream("POST", proxy.base_url + "/chat/completions", json={**CHAT, "stream": True},
                      headers={"x-fake-hold": "1"}, timeout=10) as r:
        assert r.status_code == 200
        parts = r.iter_raw()
        first = next(parts)
        got_first.set()
        assert b"data:" in first
        # The upstream stays parked until released, so a proxy that buffered the whole
        # body would never have handed us this first chunk (the read would time out).
        fake.release()
        rest = b"".join(parts)
    assert got_first.is_set() and b"[DONE]" in rest


def test_status_headers_and_body_are_relayed(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    direct = httpx.post(fake.base_url + "/chat/completions", json=CHAT,
                        headers={"x-fake-usage": json.dumps({"prompt": 3, "completion": 2})})
    via = httpx.post(proxy.base_url + "/chat/completions", json=CHAT,
                     headers={"x-fake-usage": json.dumps({"prompt": 3, "completion": 2})})
    assert via.status_code == direct.status_code == 200
    assert via.headers["content-type"] == direct.headers["content-type"]
    assert "x-request-id" in via.headers and "openai-processing-ms" in via.headers
    assert via.json()["usage"] == direct.json()["usage"]


def test_upstream_error_is_relayed_unchanged_and_recorded(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    r = httpx.post(proxy.base_url + "/chat/completions", json=CHAT, headers={"x-fake-status": "429"})
    d = httpx.post(fake.base_url + "/chat/completions", json=CHAT, headers={"x-fake-status": "429"})
    assert r.status_code == 429 and r.content == d.content
    client = OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(**CHAT, extra_headers={"x-fake-status": "503"})  # type: ignore[call-overload]
    rows = proxy.rows(expect=2)
    assert [(x["code"], x["outcome"]) for x in rows] == [(429, "upstream_http_error"), (503, "upstream_http_error")]
    assert proxy.metric("llmmeter_upstream_errors_total", kind="http_error") == 2


def test_compressed_bodies_are_relayed(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    # A non-metered path: relayed as the upstream sent it, gzip included.
    r = httpx.get(proxy.base_url + "/models", headers={"accept-encoding": "gzip"})
    assert r.status_code == 200 and r.headers.get("content-encoding") == "gzip"
    assert r.json()["data"]
    # A metered path whose upstream compresses anyway: relayed compressed, still metered.
    raw = httpx.post(proxy.base_url + "/chat/completions", json=CHAT,
                     headers={"x-fake-gzip": "1", "x-fake-usage": json.dumps({"prompt": 8, "completion": 3})})
    assert raw.headers.get("content-encoding") == "gzip"
    assert raw.json()["usage"]["prompt_tokens"] == 8
    rows = proxy.rows(expect=2)
    assert rows[-1]["input_tokens"] == 8 and rows[-1]["output_tokens"] == 3
    # The proxy asked for an uncompressed body on the metered path.
    assert fake.requests[-1]["headers"]["accept-encoding"] == "identity"
    assert gzip.decompress(gzip.compress(b"x")) == b"x"


def test_models_and_other_paths_are_forwarded(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    models = OpenAI(base_url=proxy.base_url, api_key="k").models.list()
    assert [m.id for m in models.data]
    r = httpx.get(proxy.base_url + "/no/such/thing?x=1")
    assert r.status_code == 404 and fake.requests[-1]["path"] == "/v1/no/such/thing"
    rows = proxy.rows(expect=2)
    assert [x["endpoint"] for x in rows] == ["models", "other"]


def test_upstream_key_replaces_client_key_and_meter_headers_stay(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url, env={"LLMMETER_UPSTREAM_API_KEY": "sk-upstream-secret"})
    httpx.post(proxy.base_url + "/chat/completions", json=CHAT,
               headers={"authorization": "Bearer sk-client", "x-llmmeter-tag": "rag-search",
                        "x-llmmeter-tenant": "search-team"})
    sent = fake.requests[-1]["headers"]
    assert sent["authorization"] == "Bearer sk-upstream-secret"
    assert not [h for h in sent if h.startswith("x-llmmeter-")]
    [row] = proxy.rows(expect=1)
    assert row["tag"] == "rag-search" and row["tenant"] == "search-team"
    assert "sk-upstream-secret" not in proxy.output()


def test_client_key_is_forwarded_without_upstream_key(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    httpx.post(proxy.base_url + "/chat/completions", json=CHAT, headers={"authorization": "Bearer sk-client"})
    assert fake.requests[-1]["headers"]["authorization"] == "Bearer sk-client"


def test_malformed_json_gets_a_clear_400(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    r = httpx.post(proxy.base_url + "/chat/completions", content=b'{"model": "x", "messages": [',
                   headers={"content-type": "application/json"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert "not valid JSON" in err["message"] and err["type"] == "invalid_request_error"
    r = httpx.post(proxy.base_url + "/chat/completions", json=[1, 2])
    assert r.status_code == 400 and "JSON object" in r.json()["error"]["message"]
    assert not fake.requests  # nothing reached the upstream
    rows = proxy.rows(expect=2)
    assert [(x["code"], x["outcome"]) for x in rows] == [(400, "rejected"), (400, "rejected")]


def test_body_over_the_limit_gets_413(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url, config="[server]\nmax_body_mb = 1\n")
    big = {"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": "x" * (1024 * 1024 + 10)}]}
    r = httpx.post(proxy.base_url + "/chat/completions", json=big)
    assert r.status_code == 413 and "max_body_mb" in r.json()["error"]["message"]
    assert not fake.requests


def test_unreachable_upstream_gets_502_and_is_counted(serve: Any) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    proxy = serve(upstream=dead)
    client = OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    with pytest.raises(openai.APIStatusError) as e:
        client.chat.completions.create(**CHAT)  # type: ignore[call-overload]
    assert e.value.status_code == 502
    [row] = proxy.rows(expect=1)
    assert row["outcome"] == "upstream_unreachable" and row["code"] == 502
    assert proxy.metric("llmmeter_upstream_errors_total", kind="unreachable") == 1


def test_upstream_timeout_gets_504(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url, config="[server]\nread_timeout_s = 1\n")
    t = time.monotonic()
    r = httpx.post(proxy.base_url + "/chat/completions", json=CHAT, headers={"x-fake-hang": "1"}, timeout=60)
    # The upstream never answers on its own: a 504 at all is the read timeout.
    assert r.status_code == 504 and time.monotonic() - t >= 0.9
    fake.release()
    [row] = proxy.rows(expect=1)
    assert row["outcome"] == "upstream_timeout"
    assert proxy.metric("llmmeter_upstream_errors_total", kind="timeout") == 1


def test_upstream_reset_mid_stream_breaks_the_client_stream(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    client = OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    with pytest.raises(Exception) as e:
        list(client.chat.completions.create(**CHAT, stream=True,  # type: ignore[call-overload]
                                            extra_headers={"x-fake-reset-after": "3", "x-fake-chunks": "10"}))
    assert not isinstance(e.value, AssertionError)
    [row] = proxy.rows(expect=1)
    assert row["outcome"] == "upstream_reset" and row["usage_source"] == "estimated"
    assert row["output_tokens"] > 0
    assert httpx.get(proxy.url + "/healthz").status_code == 200


def test_health_and_readiness(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    assert httpx.get(proxy.url + "/healthz").json() == {"status": "ok"}
    ready = httpx.get(proxy.url + "/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True


def test_metrics_token(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url, config='[server]\nmetrics_token = "s3cret"\n')
    assert httpx.get(proxy.url + "/metrics").status_code == 401
    ok = httpx.get(proxy.url + "/metrics", headers={"authorization": "Bearer s3cret"})
    assert ok.status_code == 200 and "llmmeter_requests_total" in ok.text


def test_client_that_leaves_mid_stream_is_recorded_and_upstream_released(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    body = {**CHAT, "stream": True}
    with httpx.stream("POST", proxy.base_url + "/chat/completions", json=body, timeout=10,
                      headers={"x-fake-chunks": "3000", "x-fake-delay-ms": "100"}) as r:  # 300 s in all
        parts = r.iter_raw()
        got = next(parts) + next(parts)
        assert b"tok" in got or b"data:" in got
    # The client is gone: the proxy stops reading the upstream and records what it relayed.
    [row] = proxy.rows(expect=1)
    assert (row["outcome"], row["usage_source"]) == ("client_closed", "estimated")
    assert row["input_tokens"] > 0 and row["code"] == 200
    deadline = time.monotonic() + 60  # generous for a loaded machine, far short of the stream's 300 s
    while fake.in_flight and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fake.in_flight == 0  # the upstream request was abandoned, not read to the end
    assert httpx.get(proxy.url + "/healthz").status_code == 200
