"""Bad requests get clear errors, never a crash, and never grow the series in /metrics."""

from __future__ import annotations

import json
import secrets
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.fake_upstream import FakeUpstream
from tests.faults.helpers import raw_http, series, status_of

CHAT = {"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": "hi"}]}
METERED = ("/chat/completions", "/completions", "/embeddings", "/responses", "/messages")


def _healthy(proxy: Any) -> None:
    assert httpx.get(proxy.url + "/healthz").status_code == 200
    r = httpx.post(proxy.base_url + "/chat/completions", json=CHAT)
    assert r.status_code == 200 and r.json()["choices"]


@pytest.mark.parametrize("path", METERED)
def test_bodies_that_are_not_json_objects_get_400_in_the_dialects_shape(path: str, fake: FakeUpstream,
                                                                         serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    bodies = [
        (b'{"model": "x", "messages": [', "application/json"),  # truncated
        (b"model=kimi-k3.1-pro&stream=true", "application/x-www-form-urlencoded"),
        (b"--b\r\nContent-Disposition: form-data; name=model\r\n\r\nx\r\n--b--\r\n", "multipart/form-data; boundary=b"),
        (b'{"model": "caf\xe9"}', "application/json"),  # latin-1, not UTF-8
        (b'{"model": "\xff\xfe\xfd"}', "application/json; charset=utf-8"),
        (b"\xef\xbb\xbf" + json.dumps(CHAT).encode(), "application/json"),  # a BOM is not JSON either
        (b'"just a string"', "application/json"),
        (b"[1, 2]", "application/json"),
        (b"null", "application/json"),
        (b"", "application/json"),
        (b"{}" * 10_000, "text/plain"),
    ]
    for body, ctype in bodies:
        r = httpx.post(proxy.base_url + path, content=body, headers={"content-type": ctype})
        assert r.status_code == 400, (body[:40], r.text)
        if path == "/messages":
            assert r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error"
        else:
            assert r.json()["error"]["code"] == "invalid_json"
    assert not fake.requests  # none of it reached the upstream
    rows = proxy.rows(expect=len(bodies))
    assert {(x["code"], x["outcome"]) for x in rows} == {(400, "rejected")} and len(rows) == len(bodies)
    _healthy(proxy)


def test_json_with_another_content_type_is_still_metered(fake: FakeUpstream, serve: Any) -> None:
    """Content-Type is the upstream's business; a JSON body is read whatever it says."""
    proxy = serve(upstream=fake.base_url)
    usage = json.dumps({"prompt": 11, "completion": 4})
    for ctype in ("text/plain", "application/octet-stream", None):
        headers = {"x-fake-usage": usage, **({"content-type": ctype} if ctype else {})}
        r = httpx.post(proxy.base_url + "/chat/completions", content=json.dumps(CHAT).encode(), headers=headers)
        assert r.status_code == 200
        assert fake.requests[-1].get("headers", {}).get("content-type") == ctype
    rows = proxy.rows(expect=3)
    assert [(x["input_tokens"], x["output_tokens"]) for x in rows] == [(11, 4)] * 3


def test_multipart_on_an_unmetered_path_is_relayed_byte_for_byte(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    blob = bytes(range(256)) * 64  # every byte value, invalid UTF-8 included
    files = {"file": ("a.wav", blob, "audio/wav")}
    r = httpx.post(proxy.base_url + "/audio/transcriptions", files=files, data={"model": "whisper-1"})
    assert r.status_code == 404  # the fake has no such route; the point is what it received
    seen = fake.requests[-1]
    assert seen["path"] == "/v1/audio/transcriptions" and blob in seen["body"]
    assert seen["headers"]["content-type"].startswith("multipart/form-data; boundary=")
    [row] = proxy.rows(expect=1)
    assert (row["endpoint"], row["code"]) == ("other", 404)


def test_bodies_over_the_limit_get_413_however_they_are_sent(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url, config="[server]\nmax_body_mb = 1\n")
    big = json.dumps({**CHAT, "messages": [{"role": "user", "content": "x" * (1024 * 1024)}]}).encode()

    def chunks() -> Any:  # no Content-Length: the limit must hold on a chunked body too
        for i in range(0, len(big), 64 * 1024):
            yield big[i:i + 64 * 1024]

    for path in ("/chat/completions", "/messages", "/files"):
        r = httpx.post(proxy.base_url + path, content=chunks())
        assert r.status_code == 413, path
        assert "max_body_mb" in r.text
    # A Content-Length that lies above the limit is refused before the body is read.
    res = raw_http(proxy.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n"
                   b"Connection: close\r\n\r\n{}")
    assert status_of(res) == 413
    assert not fake.requests
    rows = proxy.rows(expect=4)
    assert [(x["code"], x["outcome"]) for x in rows] == [(413, "rejected")] * 4
    _healthy(proxy)


def test_huge_headers_get_431_and_cost_nothing(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    # Ordinary large headers still pass: 16 KiB of cookies, 100 small headers.
    many = "".join(f"X-H{i}: v{i}\r\n" for i in range(100)).encode()
    ok = raw_http(proxy.port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nCookie: " + b"c" * 16384 + b"\r\n" + many
                  + b"Connection: close\r\n\r\n")
    assert status_of(ok) == 200 and fake.requests[-1]["headers"]["x-h99"] == "v99"
    before = len(fake.requests)
    for head in (b"X-Big: " + b"a" * (1024 * 1024) + b"\r\n",  # one 1 MiB header
                 b"".join(b"X-H%d: v\r\n" % i for i in range(200_000)),  # 200,000 small ones
                 ):
        res = raw_http(proxy.port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n")
        assert status_of(res) == 431, res[:200]
    # A request line of 1 MiB (a path no server would take) is refused the same way.
    res = raw_http(proxy.port, b"GET /v1/" + b"p" * (1024 * 1024) + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status_of(res) == 431
    assert len(fake.requests) == before  # none was forwarded
    _healthy(proxy)


def test_bytes_that_are_not_utf8_in_headers_do_not_break_anything(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    body = json.dumps(CHAT).encode()
    req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"X-LLMMeter-Tenant: t\xff\xfe-\xe9\r\nX-LLMMeter-Tag: tag\xc3\x28\r\nX-Client-Note: \xff\xfe\r\n"
           b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
    res = raw_http(proxy.port, req)
    assert status_of(res) == 200, res[:300]
    [row] = proxy.rows(expect=1)
    assert row["tenant"].startswith("t") and row["outcome"] == "ok"
    assert row["tag"] is not None and set(row["tag"]) <= set("abcdefghijklmnopqrstuvwxyz_(")
    _healthy(proxy)


def test_unknown_paths_and_methods(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    # Outside /v1 the proxy answers itself; nothing goes upstream.
    for method, path in (("GET", "/"), ("GET", "/v2/chat/completions"), ("POST", "/chat/completions"),
                         ("GET", "/metricsx"), ("DELETE", "/metrics"),
                         ("POST", "/healthz"), ("GET", "/v1"), ("GET", "/" + "x" * 8000)):
        r = httpx.request(method, proxy.url + path)
        assert r.status_code in (404, 405), (method, path, r.status_code)
    assert not fake.requests
    # Inside /v1 they are the upstream's to answer: forwarded, recorded as `other`.
    r = httpx.get(proxy.base_url + "/chat/completions")  # GET on a metered path
    assert r.status_code == 404 and fake.requests[-1]["method"] == "GET"
    r = httpx.request("PATCH", proxy.base_url + "/no-such-thing", content=b"\xff\x00")
    assert r.status_code == 404 and fake.requests[-1]["body"] == b"\xff\x00"
    rows = proxy.rows(expect=2)
    assert [x["endpoint"] for x in rows] == ["other", "other"]
    _healthy(proxy)


def test_odd_but_valid_json_is_forwarded_and_metered(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    odd: list[dict[str, Any]] = [
        {"messages": [{"role": "user", "content": "no model"}]},
        {"model": 42, "messages": "not a list"},
        {"model": ["a"], "messages": [{"role": "user", "content": {"nested": [1, None, True]}}]},
        {"model": "kimi-k3.1-pro", "messages": [], "stream": "yes", "service_tier": 7, "user": {"id": 1},
         "stream_options": "on", "metadata": [1]},
        {"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": "x" * 200_000}], "n": 10**30},
    ]
    for body in odd:
        r = httpx.post(proxy.base_url + "/chat/completions", json=body, headers={"x-fake-no-usage": "1"})
        assert r.status_code == 200, (body, r.text)
    rows = proxy.rows(expect=len(odd))
    assert len(rows) == len(odd) and all(x["outcome"] == "ok" for x in rows)
    assert all(x["usage_source"] == "estimated" and x["input_tokens"] >= 0 for x in rows)
    _healthy(proxy)


def test_a_10000_character_model_name(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    model = "m" + secrets.token_hex(4999)  # 9,999 hex digits after the m
    client = OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])
    assert reply.model == model  # forwarded as the client sent it
    [row] = proxy.rows(expect=1)
    assert row["model_requested"] == model[:256] and row["response_model"] == model[:256]
    assert row["model"] is None and row["cost_units"] is None  # unpriced, not mistaken for a known model
    text = httpx.get(proxy.url + "/metrics").text
    assert model[:40] not in text
    assert proxy.metric("llmmeter_unpriced_requests_total", model="other") == 1


def test_client_chosen_values_never_grow_the_series(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)

    def wave(seed: str) -> None:
        """Every value a client controls, new each time."""
        body = {**CHAT, "model": f"model-{seed}" * 50, "service_tier": f"tier-{seed}", "user": f"u-{seed}"}
        headers = {"x-llmmeter-tenant": f"tenant-{seed}", "x-llmmeter-tag": f"tag-{seed}",
                   "x-fake-model": f"resp-{seed}", "x-fake-service-tier": f"st-{seed}"}
        httpx.post(proxy.base_url + "/chat/completions", json=body, headers=headers)
        httpx.post(proxy.base_url + "/chat/completions", json={**body, "stream": True}, headers=headers)
        httpx.post(proxy.base_url + "/messages", json={**body, "max_tokens": 3}, headers=headers)
        httpx.get(proxy.base_url + f"/path-{seed}", headers=headers)
        httpx.post(proxy.base_url + "/chat/completions", content=b"{" + seed.encode(), headers=headers)
        httpx.post(proxy.base_url + "/chat/completions", json=body, headers={**headers, "x-fake-no-usage": "1"})

    wave("first")
    assert proxy.rows(expect=6)
    known = series(proxy.url)
    for i in range(25):
        wave(secrets.token_hex(6) + str(i))
    rows = proxy.rows(expect=6 * 26)
    assert len(rows) == 6 * 26
    assert series(proxy.url) == known  # the same series, only their values moved
    assert proxy.metric("llmmeter_requests_total", tenant="other") == 6 * 26
