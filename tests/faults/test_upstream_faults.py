"""The upstream fails in every way it can: errors, resets, hangs, silence. The client sees
what a direct client would, the failure is recorded and counted, and the proxy stays healthy."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.fake_upstream import FakeUpstream
from tests.faults.helpers import open_connections, wait_until
from tests.serve import free_port

MSGS: Any = [{"role": "user", "content": "hello there"}]
CHAT = {"model": "kimi-k3.1-pro", "messages": MSGS}
# (path, request body) per metered dialect; the fake answers each in its own wire format.
DIALECTS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", CHAT),
    "completions": ("/v1/completions", {"model": "kimi-k3.1-pro", "prompt": "hello there"}),
    "embeddings": ("/v1/embeddings", {"model": "text-embedding-test", "input": "hello there"}),
    "responses": ("/v1/responses", {"model": "gpt-test", "input": "hello there"}),
    "messages": ("/v1/messages", {"model": "claude-test", "max_tokens": 16, "messages": MSGS}),
}


def _healthy(proxy: Any) -> None:
    assert httpx.get(proxy.url + "/healthz").status_code == 200
    r = httpx.post(proxy.base_url + "/chat/completions", json=CHAT, timeout=10)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]


# --- 4xx / 5xx -----------------------------------------------------------------------------

STATUSES = (400, 401, 404, 413, 422, 429, 500, 502, 503, 529)
PER_REQUEST = frozenset({"x-request-id", "request-id", "date", "server"})


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
def test_error_statuses_are_relayed_unchanged_and_recorded(dialect: str, fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    path, body = DIALECTS[dialect]
    modes = (False, True) if dialect != "embeddings" else (False,)
    for status in STATUSES:
        for streamed in modes:
            req = {**body, "stream": True} if streamed else body
            headers = {"x-fake-status": str(status)}
            direct = httpx.post(fake.url + path, json=req, headers=headers)
            via = httpx.post(proxy.url + path, json=req, headers=headers)
            assert via.status_code == direct.status_code == status
            # The same body and headers, but for the per-request id.
            assert _without_id(via.json()) == _without_id(direct.json())
            assert _headers(via) == _headers(direct)
    rows = proxy.rows(expect=len(STATUSES) * len(modes))
    assert [(r["code"], r["outcome"]) for r in rows] == [(s, "upstream_http_error") for s in STATUSES
                                                         for _ in modes]
    # An error body without usage: nothing reported, nothing counted (not zero reported tokens).
    assert all(r["usage_source"] == "none" and r["endpoint"] == dialect for r in rows)
    # 5xx and 429 are the upstream's failures; other 4xx the client's (README "Decisions").
    assert proxy.metric("llmmeter_upstream_errors_total", kind="http_error") == 5 * len(modes)
    assert proxy.metric("llmmeter_requests_total", code="429", outcome="upstream_http_error") == len(modes)


def _headers(r: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in r.headers.items() if k not in PER_REQUEST}


def _without_id(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _without_id(v) for k, v in obj.items() if k != "request_id"}
    return obj


@pytest.mark.parametrize("dialect", ["chat", "responses", "messages"])
def test_usage_an_error_body_reports_is_recorded(dialect: str, fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    path, body = DIALECTS[dialect]
    usage = {"prompt": 700, "completion": 0}
    r = httpx.post(proxy.url + path, json=body, headers={"x-fake-status": "400", "x-fake-error-usage": "1",
                                                         "x-fake-usage": json.dumps(usage)})
    assert r.status_code == 400 and "usage" in r.json()
    [row] = proxy.rows(expect=1)
    assert (row["code"], row["outcome"], row["usage_source"]) == (400, "upstream_http_error", "upstream")
    assert (row["input_tokens"], row["output_tokens"]) == (700, 0)


def test_sdks_raise_their_usual_errors(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    oa = openai.OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    an = anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0)
    cases: list[tuple[Callable[[], Any], type[Exception], int]] = [
        (lambda: oa.chat.completions.create(**CHAT, extra_headers={"x-fake-status": "429"}),  # type: ignore[call-overload]
         openai.RateLimitError, 429),
        (lambda: oa.responses.create(model="gpt-test", input="x", extra_headers={"x-fake-status": "401"}),
         openai.AuthenticationError, 401),
        (lambda: an.messages.create(model="claude-test", max_tokens=5, messages=MSGS,
                                    extra_headers={"x-fake-status": "529"}), anthropic.InternalServerError, 529),
        (lambda: an.messages.create(model="claude-test", max_tokens=5, messages=MSGS,
                                    extra_headers={"x-fake-status": "400"}), anthropic.BadRequestError, 400),
    ]
    for call, kind, status in cases:
        with pytest.raises(kind) as e:
            call()
        assert e.value.status_code == status  # type: ignore[attr-defined]
    assert [r["code"] for r in proxy.rows(expect=4)] == [429, 401, 529, 400]


# --- resets mid-stream ----------------------------------------------------------------------

def _broken_stream(base_url: str, headers: dict[str, str]) -> None:
    """A chat stream the upstream breaks: the client must see an error, not a clean end."""
    with pytest.raises(httpx.HTTPError), httpx.stream(
            "POST", base_url + "/chat/completions", json={**CHAT, "stream": True}, headers=headers) as r:
        for _ in r.iter_raw():
            pass


def _stream_error(call: Callable[[], Any]) -> BaseException:
    try:
        for _ in call():
            pass
    except Exception as e:  # the point is which exception: compared below
        return e
    raise AssertionError("the stream ended cleanly")


def test_reset_mid_stream_looks_the_same_to_a_client_as_a_direct_reset(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    cut = {"x-fake-reset-after": "7", "x-fake-chunks": "12"}  # every dialect has sent content by then

    def calls(base: str) -> list[Callable[[], Any]]:
        oa = openai.OpenAI(base_url=base + "/v1", api_key="k", max_retries=0)
        an = anthropic.Anthropic(base_url=base, api_key="k", max_retries=0)
        return [
            lambda: oa.chat.completions.create(**CHAT, stream=True, extra_headers=cut),  # type: ignore[call-overload]
            lambda: oa.completions.create(model="kimi-k3.1-pro", prompt="hello", stream=True, extra_headers=cut),
            lambda: oa.responses.create(model="gpt-test", input="hello", stream=True, extra_headers=cut),
            lambda: an.messages.create(model="claude-test", max_tokens=16, messages=MSGS, stream=True,
                                       extra_headers=cut),
        ]

    for direct, via in zip(calls(fake.url), calls(proxy.url), strict=True):
        d, v = _stream_error(direct), _stream_error(via)
        assert type(v) is type(d), (d, v)
    rows = proxy.rows(expect=4)
    assert [r["endpoint"] for r in rows] == ["chat", "completions", "responses", "messages"]
    for r in rows:
        assert (r["outcome"], r["code"], r["usage_source"]) == ("upstream_reset", 200, "estimated"), r["endpoint"]
        assert r["input_tokens"] > 0 and r["output_tokens"] > 0
    assert proxy.metric("llmmeter_upstream_errors_total", kind="reset") == 4
    assert proxy.metric("llmmeter_estimated_requests_total") == 4
    _healthy(proxy)


def test_a_later_reset_records_more_estimated_output(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    for after in (3, 30):
        _broken_stream(proxy.base_url, {"x-fake-reset-after": str(after), "x-fake-chunks": "40"})
    early, late = proxy.rows(expect=2)
    assert early["input_tokens"] == late["input_tokens"] > 0  # the same prompt
    # 2 content deltas relayed before the first reset, 29 before the second: the estimate follows.
    assert 0 < 5 * early["output_tokens"] < late["output_tokens"]


def test_upstream_that_closes_before_answering_gets_502(serve: Any) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    stop = threading.Event()

    def slam() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.close()  # read the request, answer nothing

    t = threading.Thread(target=slam, daemon=True)
    t.start()
    try:
        proxy = serve(upstream=f"http://127.0.0.1:{listener.getsockname()[1]}/v1")
        r = httpx.post(proxy.base_url + "/chat/completions", json=CHAT, timeout=10)
        # The request reached the upstream (it may have been billed): a reset, not "unreachable".
        assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_reset"
        [row] = proxy.rows(expect=1)
        assert row["outcome"] == "upstream_reset"
    finally:
        stop.set()
        listener.close()


# --- hangs -----------------------------------------------------------------------------------

def test_upstream_hangs_before_answering_504_within_the_read_timeout(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url, config="[server]\nread_timeout_s = 2\n")
    for path, body in (DIALECTS["chat"], DIALECTS["messages"], ("/v1/chat/completions", {**CHAT, "stream": True})):
        t = time.monotonic()
        r = httpx.post(proxy.url + path, json=body, headers={"x-fake-hang": "1"}, timeout=60)
        took = time.monotonic() - t
        # The upstream never answers on its own, so a 504 at all is the read timeout: only its
        # lower bound is checked, which a slow machine cannot break.
        assert r.status_code == 504 and took >= 1.9, took
        if path == "/v1/messages":
            assert r.json()["type"] == "error"  # Anthropic's error shape on /v1/messages
        else:
            assert r.json()["error"]["code"] == "upstream_timeout"
    rows = proxy.rows(expect=3)
    assert {(x["code"], x["outcome"]) for x in rows} == {(504, "upstream_timeout")}
    assert proxy.metric("llmmeter_upstream_errors_total", kind="timeout") == 3
    fake.release()
    _healthy(proxy)


def test_upstream_stalls_mid_stream_the_stream_breaks_within_the_read_timeout(fake: FakeUpstream,
                                                                             serve: Any) -> None:
    proxy = serve(upstream=fake.base_url, config="[server]\nread_timeout_s = 2\n")
    t = time.monotonic()
    got = b""
    with pytest.raises(httpx.HTTPError), httpx.stream(
            "POST", proxy.base_url + "/chat/completions", json={**CHAT, "stream": True},
            headers={"x-fake-hold": "1"}, timeout=60) as r:
        assert r.status_code == 200
        for chunk in r.iter_raw():  # the first event, then silence
            got += chunk
    took = time.monotonic() - t
    assert b"data:" in got and b"[DONE]" not in got
    assert took >= 1.9, took  # the rest never comes on its own: the break is the read timeout
    [row] = proxy.rows(expect=1)
    assert (row["outcome"], row["code"], row["usage_source"]) == ("upstream_timeout", 200, "estimated")
    assert row["input_tokens"] > 0
    assert proxy.metric("llmmeter_upstream_errors_total", kind="timeout") == 1
    fake.release()
    _healthy(proxy)


# --- unreachable -------------------------------------------------------------------------------

def test_unreachable_upstream_502_at_once_on_every_endpoint(serve: Any) -> None:
    proxy = serve(upstream=f"http://127.0.0.1:{free_port()}/v1")
    for dialect, (path, body) in sorted(DIALECTS.items()):
        for streamed in (False, True):
            t = time.monotonic()
            r = httpx.post(proxy.url + path, json={**body, "stream": streamed}, timeout=30)
            assert r.status_code == 502 and time.monotonic() - t < 2, dialect
            if dialect == "messages":
                assert r.json()["type"] == "error" and r.json()["error"]["type"] == "api_error"
            else:
                assert r.json()["error"]["code"] == "upstream_unreachable"
    r = httpx.get(proxy.base_url + "/models")
    assert r.status_code == 502
    rows = proxy.rows(expect=11)
    assert len(rows) == 11 and {(x["code"], x["outcome"]) for x in rows} == {(502, "upstream_unreachable")}
    assert all(x["output_tokens"] == 0 for x in rows)
    assert proxy.metric("llmmeter_upstream_errors_total", kind="unreachable") == 11
    assert proxy.metric("llmmeter_requests_total", outcome="upstream_unreachable", code="502") == 11
    assert httpx.get(proxy.url + "/healthz").status_code == 200


def test_upstream_that_comes_back_is_used_again(serve: Any) -> None:
    port = free_port()
    proxy = serve(upstream=f"http://127.0.0.1:{port}/v1")
    assert httpx.post(proxy.base_url + "/chat/completions", json=CHAT).status_code == 502
    with FakeUpstream(port) as fake:
        r = httpx.post(proxy.base_url + "/chat/completions", json=CHAT)
        assert r.status_code == 200 and fake.requests
    down, up = proxy.rows(expect=2)
    assert (down["outcome"], up["outcome"]) == ("upstream_unreachable", "ok")


@pytest.fixture
def many_streams(fake: FakeUpstream) -> Iterator[int]:
    yield 16
    fake.release()


def test_resets_leak_no_upstream_connections(fake: FakeUpstream, serve: Any, many_streams: int) -> None:
    proxy = serve(upstream=fake.base_url)
    for _ in range(many_streams):
        _broken_stream(proxy.base_url, {"x-fake-reset-after": "2"})
    assert wait_until(lambda: open_connections(fake.port) == 0, timeout=10), open_connections(fake.port)
    assert len(proxy.rows(expect=many_streams)) == many_streams
