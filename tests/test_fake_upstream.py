"""The fake upstream speaks the wire formats the official SDKs accept, checked by talking to it directly."""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from openai import OpenAI

from tests.fake_upstream import FakeUpstream
from tests.faults.helpers import wait_until

ROOT = Path(__file__).resolve().parents[1]
MESSAGES: list[Any] = [{"role": "user", "content": "say hello"}]
WAIT = 60  # seconds: a generous deadline for a condition, met at once on an idle machine
USAGE = {"prompt": 120, "cached": 100, "cache_write": 8, "completion": 30, "reasoning": 12}


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream() as fake:
        yield fake


def client(fake: FakeUpstream) -> OpenAI:
    return OpenAI(base_url=fake.base_url, api_key="k", max_retries=0)


def usage_header(**over: int) -> dict[str, str]:
    return {"x-fake-usage": json.dumps({**USAGE, **over})}


def test_chat_plain_openai_dialect(upstream: FakeUpstream) -> None:
    raw = client(upstream).chat.completions.with_raw_response.create(
        model="gpt-test", messages=MESSAGES, extra_headers=usage_header())
    reply = raw.parse()
    assert raw.headers["x-request-id"].startswith("req_") and reply.id.startswith("chatcmpl-")
    assert reply.choices[0].message.content == "tok0 tok1 tok2 tok3 "
    assert reply.usage is not None and reply.usage.prompt_tokens == 120 and reply.usage.total_tokens == 150
    assert reply.usage.prompt_tokens_details is not None
    assert reply.usage.prompt_tokens_details.cached_tokens == 100
    assert reply.usage.model_dump()["prompt_tokens_details"]["cache_write_tokens"] == 8
    assert reply.usage.completion_tokens_details is not None
    assert reply.usage.completion_tokens_details.reasoning_tokens == 12
    other = client(upstream).chat.completions.with_raw_response.create(model="gpt-test", messages=MESSAGES)
    assert other.headers["x-request-id"] != raw.headers["x-request-id"]
    # Without x-fake-usage: completion counts the emitted pieces, cache_write stays absent.
    usage = other.parse().usage
    assert usage is not None and usage.completion_tokens == 4 and usage.prompt_tokens > 0
    assert "cache_write_tokens" not in usage.model_dump(exclude_unset=True)["prompt_tokens_details"]


@pytest.mark.parametrize("include_usage", [False, True])
def test_chat_stream_usage_chunk_only_when_asked(upstream: FakeUpstream, include_usage: bool) -> None:
    kw: dict[str, Any] = {"stream_options": {"include_usage": True}} if include_usage else {}
    chunks = list(client(upstream).chat.completions.create(
        model="gpt-test", messages=MESSAGES, stream=True, extra_headers={"x-fake-chunks": "6", **usage_header()}, **kw))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "".join(f"tok{i} " for i in range(6))
    assert chunks[0].choices[0].delta.role == "assistant"
    with_choices = [c for c in chunks if c.choices]
    assert with_choices[-1].choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in with_choices)
    if include_usage:
        assert chunks[-1].choices == [] and chunks[-1].usage is not None
        assert chunks[-1].usage.completion_tokens == 30
    else:
        assert len(with_choices) == len(chunks)


def test_chat_dialects_usage_shapes(upstream: FakeUpstream) -> None:
    def usage(model: str, **over: int) -> dict[str, Any]:
        r = httpx.post(upstream.base_url + "/chat/completions", json={"model": model, "messages": MESSAGES},
                       headers=usage_header(**over))
        body: dict[str, Any] = r.json()
        return body

    kimi = usage("kimi-k3.1-pro")["usage"]
    assert kimi == {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150, "cached_tokens": 100}
    deepseek = usage("deepseek-test")["usage"]
    assert deepseek["prompt_cache_hit_tokens"] == 100 and deepseek["prompt_cache_miss_tokens"] == 20
    assert deepseek["completion_tokens_details"] == {"reasoning_tokens": 12}
    llama = usage("llama-test")
    assert llama["usage"] == {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}
    assert llama["timings"]["predicted_n"] == 30
    assert usage("smollm2")["usage"] == llama["usage"]


def test_chat_usage_in_choice_service_tier_model_and_no_usage(upstream: FakeUpstream) -> None:
    url = upstream.base_url + "/chat/completions"
    body = {"model": "kimi-k3.1-pro", "messages": MESSAGES}
    plain = httpx.post(url, json=body, headers={"x-fake-usage-in-choice": "1", "x-fake-service-tier": "priority",
                                                "x-fake-model": "moonshot/kimi"}).json()
    assert "usage" not in plain and plain["choices"][0]["usage"]["completion_tokens"] == 4
    assert plain["service_tier"] == "priority" and plain["model"] == "moonshot/kimi"
    chunks = list(client(upstream).chat.completions.create(
        model="kimi-k3.1-pro", messages=MESSAGES, stream=True, stream_options={"include_usage": True},
        extra_headers={"x-fake-usage-in-choice": "1", **usage_header()}))
    last = chunks[-1]
    assert last.choices[0].finish_reason == "stop" and last.usage is not None and last.usage.prompt_tokens == 120
    assert httpx.post(url, json=body, headers={"x-fake-no-usage": "1"}).json().keys() >= {"choices", "model"}
    assert "usage" not in httpx.post(url, json=body, headers={"x-fake-no-usage": "1"}).json()
    quiet = list(client(upstream).chat.completions.create(
        model="gpt-test", messages=MESSAGES, stream=True, stream_options={"include_usage": True},
        extra_headers={"x-fake-no-usage": "1"}))
    assert all(c.usage is None and c.choices for c in quiet)


def test_legacy_completions_and_embeddings(upstream: FakeUpstream) -> None:
    c = client(upstream)
    reply = c.completions.create(model="gpt-test", prompt="hi", extra_headers=usage_header())
    assert reply.object == "text_completion" and reply.choices[0].text == "tok0 tok1 tok2 tok3 "
    assert reply.usage is not None and reply.usage.completion_tokens == 30
    chunks = list(c.completions.create(model="gpt-test", prompt="hi", stream=True,
                                       stream_options={"include_usage": True}, extra_headers=usage_header()))
    assert "".join(x.choices[0].text for x in chunks if x.choices) == "tok0 tok1 tok2 tok3 "
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == 120
    emb = c.embeddings.create(model="text-embedding-test", input=["a", "b", "c"], extra_headers=usage_header())
    assert [d.index for d in emb.data] == [0, 1, 2] and len(emb.data[0].embedding) == 8
    assert isinstance(emb.data[0].embedding[0], float)
    assert emb.usage.prompt_tokens == emb.usage.total_tokens == 120
    floats = httpx.post(upstream.base_url + "/embeddings", json={"model": "e", "input": "one"}).json()
    assert len(floats["data"]) == 1 and floats["data"][0]["embedding"] == emb.data[0].embedding


def test_responses_plain_and_stream(upstream: FakeUpstream) -> None:
    c = client(upstream)
    reply = c.responses.create(model="gpt-test", input="hello", extra_headers=usage_header())
    assert reply.id.startswith("resp_") and reply.status == "completed" and reply.output_text == "tok0 tok1 tok2 tok3 "
    assert reply.usage is not None and reply.usage.input_tokens == 120 and reply.usage.output_tokens == 30
    assert reply.usage.input_tokens_details.cached_tokens == 100
    assert reply.usage.output_tokens_details.reasoning_tokens == 12
    events = list(c.responses.create(model="gpt-test", input="hello", stream=True, extra_headers=usage_header()))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == "tok0 tok1 tok2 tok3 "
    done = events[-1]
    assert done.type == "response.completed" and done.response.usage is not None
    assert done.response.usage.total_tokens == 150
    # The SDK's accumulating helper replays every event into a snapshot.
    with c.responses.stream(model="gpt-test", input="hello", extra_headers=usage_header()) as stream:
        final = stream.get_final_response()
    assert final.output_text == "tok0 tok1 tok2 tok3 " and final.usage is not None


def test_anthropic_messages_plain_and_stream(upstream: FakeUpstream) -> None:
    ac = anthropic.Anthropic(base_url=upstream.url, api_key="k", max_retries=0)
    headers = {**usage_header(), "x-fake-speed": "fast"}
    msg = ac.messages.create(model="claude-test", max_tokens=50, messages=MESSAGES, extra_headers=headers)
    assert msg.id.startswith("msg_") and msg.stop_reason == "end_turn"
    assert msg.content[0].type == "text" and msg.content[0].text == "tok0 tok1 tok2 tok3 "
    # "prompt" is the whole prompt: input_tokens is what is left after cache reads and writes.
    assert (msg.usage.input_tokens, msg.usage.cache_read_input_tokens, msg.usage.cache_creation_input_tokens) == (
        12, 100, 8)
    assert msg.usage.output_tokens == 30 and msg.usage.speed == "fast" and msg.usage.service_tier == "standard"
    events = list(ac.messages.create(model="claude-test", max_tokens=50, messages=MESSAGES, stream=True,
                                     extra_headers=headers))
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds.count("content_block_delta") == 4
    start, delta = events[0], events[-2]
    assert start.type == "message_start" and start.message.usage.cache_read_input_tokens == 100
    assert start.message.usage.output_tokens == 1
    assert delta.type == "message_delta" and delta.usage.output_tokens == 30
    with ac.messages.stream(model="claude-test", max_tokens=50, messages=MESSAGES, extra_headers=headers) as s:
        final = s.get_final_message()
    assert final.usage.output_tokens == 30 and final.usage.input_tokens == 12
    assert upstream.requests[-1]["path"] == "/v1/messages"


def test_error_statuses_in_each_dialect(upstream: FakeUpstream) -> None:
    with pytest.raises(openai.RateLimitError) as e:
        client(upstream).chat.completions.create(model="gpt-test", messages=MESSAGES,
                                                 extra_headers={"x-fake-status": "429"})
    assert e.value.response.headers["retry-after"] == "1"
    assert e.value.body == {"message": "fake upstream error 429", "type": "requests", "code": "rate_limit_exceeded",
                            "param": None}
    with pytest.raises(openai.InternalServerError):
        client(upstream).chat.completions.create(model="gpt-test", messages=MESSAGES,
                                                 extra_headers={"x-fake-status": "503"})
    ac = anthropic.Anthropic(base_url=upstream.url, api_key="k", max_retries=0)
    with pytest.raises(anthropic.RateLimitError) as ae:
        ac.messages.create(model="claude-test", max_tokens=5, messages=MESSAGES, extra_headers={"x-fake-status": "429"})
    assert ae.value.body is not None and ae.value.response.json()["error"]["type"] == "rate_limit_error"
    missing = httpx.post(upstream.base_url + "/no/such", json={})
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "invalid_request_error" and missing.json()["error"]["code"] == "not_found"


def test_reset_breaks_the_stream(upstream: FakeUpstream) -> None:
    body = {"model": "gpt-test", "messages": MESSAGES, "stream": True}
    got = bytearray()
    with pytest.raises(httpx.RemoteProtocolError), httpx.stream(
            "POST", upstream.base_url + "/chat/completions", json=body,
            headers={"x-fake-reset-after": "3", "x-fake-chunks": "10"}) as r:
        assert r.status_code == 200
        for part in r.iter_raw():
            got += part
    assert got.count(b"data:") == 3 and b"[DONE]" not in got
    with pytest.raises(openai.APIError):
        list(client(upstream).chat.completions.create(model="gpt-test", messages=MESSAGES, stream=True,
                                                      extra_headers={"x-fake-reset-after": "2"}))


def test_hold_sends_the_first_event_then_waits_for_release(upstream: FakeUpstream) -> None:
    body = {"model": "gpt-test", "messages": MESSAGES, "stream": True}
    with httpx.stream("POST", upstream.base_url + "/chat/completions", json=body,
                      headers={"x-fake-hold": "1"}, timeout=WAIT) as r:
        parts = r.iter_raw()
        first = next(parts)
        assert first.count(b"data:") == 1
        # Parked after the first event: the rest of the stream waits for release().
        assert wait_until(lambda: upstream.parked == 1, timeout=WAIT)
        upstream.release()
        rest = b"".join(parts)
    assert rest.endswith(b"data: [DONE]\n\n") and upstream.parked == 0
    # release() is permanent: a later hold does not park.
    assert httpx.post(upstream.base_url + "/chat/completions", json={**body, "stream": False},
                      headers={"x-fake-hold": "1"}, timeout=WAIT).status_code == 200


def hanging_request() -> bytes:
    payload = json.dumps({"model": "gpt-test", "messages": MESSAGES}).encode()
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
            b"x-fake-hang: 1\r\ncontent-length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)


def test_hang_waits_before_headers_and_ends_when_the_client_leaves(upstream: FakeUpstream) -> None:
    # Every wait is for a condition: on a loaded machine a request can take any time to arrive.
    with socket.create_connection(("127.0.0.1", upstream.port), timeout=WAIT) as s:
        s.sendall(hanging_request())
        assert wait_until(lambda: upstream.parked == 1, timeout=WAIT)
        s.setblocking(False)
        with pytest.raises(BlockingIOError):
            s.recv(1)  # parked before the response headers: not a byte has been sent
    # The parked request notices the disconnect and ends.
    assert wait_until(lambda: upstream.in_flight == 0, timeout=WAIT)
    assert upstream.parked == 0
    results: list[int | Exception] = []

    def call() -> None:
        try:
            results.append(httpx.post(upstream.base_url + "/chat/completions", json={
                "model": "gpt-test", "messages": MESSAGES}, headers={"x-fake-hang": "1"}, timeout=WAIT).status_code)
        except Exception as e:  # the assertion below shows it
            results.append(e)

    t = threading.Thread(target=call, daemon=True)
    t.start()
    assert wait_until(lambda: upstream.parked == 1, timeout=WAIT)
    assert not results and upstream.in_flight == 1  # no answer while parked
    upstream.release()
    t.join(timeout=WAIT)
    assert results == [200]


def test_the_hang_scenario_holds_while_other_processes_load_every_core() -> None:
    # It once slept a fixed 0.1 s and failed every time on a busy machine. Now its waits are for
    # conditions, so a loaded machine can only make it slower: run it over and over beside
    # processes that keep every core busy, the load under which it used to fail.
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        for _ in range(10):
            assert all(b.poll() is None for b in burners)  # the load is still there
            with FakeUpstream() as fake:
                test_hang_waits_before_headers_and_ends_when_the_client_leaves(fake)
    finally:
        for b in burners:
            b.kill()
            b.wait()


def test_a_stream_stops_when_its_client_leaves(upstream: FakeUpstream) -> None:
    body = {"model": "gpt-test", "messages": MESSAGES, "stream": True}
    # The whole stream would take 120 s, longer than the wait below allows.
    with httpx.stream("POST", upstream.base_url + "/chat/completions", json=body,
                      headers={"x-fake-delay-ms": "100", "x-fake-chunks": "1200"}, timeout=WAIT) as r:
        next(r.iter_raw())
        assert upstream.in_flight == 1
    assert wait_until(lambda: upstream.in_flight == 0, timeout=WAIT)


def test_gzip(upstream: FakeUpstream) -> None:
    with httpx.Client() as h:
        r = h.post(upstream.base_url + "/chat/completions", json={"model": "gpt-test", "messages": MESSAGES},
                   headers={"x-fake-gzip": "1", "accept-encoding": "identity"})
        assert r.headers["content-encoding"] == "gzip" and r.json()["usage"]["completion_tokens"] == 4
        with h.stream("GET", upstream.base_url + "/models", headers={"accept-encoding": "gzip"}) as s:
            assert s.headers["content-encoding"] == "gzip"
            listed = json.loads(gzip.decompress(b"".join(s.iter_raw())))
        assert listed["object"] == "list" and listed["data"][0]["id"] == "kimi-k3.1-pro"
        plain = h.get(upstream.base_url + "/models", headers={"accept-encoding": "identity"})
        assert "content-encoding" not in plain.headers
    assert "kimi-k3.1-pro" in [m.id for m in client(upstream).models.list()]


def test_requests_are_recorded(upstream: FakeUpstream) -> None:
    httpx.post(upstream.base_url + "/chat/completions?api-version=1", json={"model": "gpt-test", "messages": []},
               headers={"X-Custom": "Yes", "Authorization": "Bearer sk-x"})
    httpx.post(upstream.base_url + "/completions", content=b"not json")
    first, second = upstream.requests
    assert first["method"] == "POST" and first["path"] == "/v1/chat/completions" and first["query"] == "api-version=1"
    assert first["headers"]["x-custom"] == "Yes" and first["headers"]["authorization"] == "Bearer sk-x"
    assert first["json"] == {"model": "gpt-test", "messages": []} and json.loads(first["body"]) == first["json"]
    assert second["json"] is None and second["body"] == b"not json"


def test_delay_paces_the_stream(upstream: FakeUpstream) -> None:
    t = time.monotonic()
    list(client(upstream).chat.completions.create(model="gpt-test", messages=MESSAGES, stream=True,
                                                  extra_headers={"x-fake-delay-ms": "20", "x-fake-chunks": "3"}))
    assert time.monotonic() - t >= 0.1  # 20 ms after each of the 5 events before [DONE]


def test_runs_standalone() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fake_upstream.py"), "--port", str(port)],
                            cwd=ROOT)
    try:
        deadline = time.monotonic() + WAIT  # a loaded machine can take many seconds to start Python
        while True:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.05)
        assert r.status_code == 200 and r.json()["data"]
    finally:
        proc.terminate()
        proc.wait(timeout=5)
