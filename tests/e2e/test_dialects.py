"""The Responses API and Anthropic Messages through llmmeter with the official SDKs, and tenants."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import anthropic
import httpx
import pytest
from openai import OpenAI

from tests.e2e.test_metering import expected_cost, units
from tests.fake_upstream import FakeUpstream

USAGE = {"prompt": 5000, "cached": 3000, "completion": 700, "reasoning": 300}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_responses_api_exact(fake: FakeUpstream, serve: Any, stream: bool) -> None:
    proxy = serve(upstream=fake.base_url)
    client = OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    headers = {"x-fake-usage": json.dumps(USAGE)}
    if stream:
        events = list(client.responses.create(model="gpt-test", input="hello", stream=True, extra_headers=headers))
        assert events[-1].type == "response.completed"
    else:
        reply = client.responses.create(model="gpt-test", input="hello", extra_headers=headers)
        assert reply.usage is not None and reply.usage.input_tokens == 5000
    [row] = proxy.rows(expect=1)
    assert (row["input_tokens"], row["cache_read_tokens"], row["output_tokens"], row["reasoning_tokens"]) == (
        2000, 3000, 700, 300)
    assert row["endpoint"] == "responses" and row["usage_source"] == "upstream"
    assert row["cost_units"] == units(expected_cost("gpt-test", "standard", 2000, 700, 3000, 0))
    if stream:
        assert row["ttft_ms"] is not None


def test_cut_responses_stream_is_estimated(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    client = OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    with pytest.raises(Exception) as e:
        list(client.responses.create(model="gpt-test", input="hello there", stream=True,
                                     extra_headers={"x-fake-reset-after": "6", "x-fake-chunks": "8"}))
    assert not isinstance(e.value, AssertionError)
    [row] = proxy.rows(expect=1)
    assert (row["outcome"], row["usage_source"]) == ("upstream_reset", "estimated")
    assert row["input_tokens"] > 0 and row["output_tokens"] > 0


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_anthropic_messages_exact_with_speed_tier(fake: FakeUpstream, serve: Any, stream: bool) -> None:
    proxy = serve(upstream=fake.base_url)
    client = anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant-client", max_retries=0)
    headers = {"x-fake-usage": json.dumps({"prompt": 1500, "cached": 1000, "cache_write": 200, "completion": 80}),
               "x-fake-speed": "fast"}
    kw: dict[str, Any] = {"model": "kimi-k3.1-pro", "max_tokens": 100,
                          "messages": [{"role": "user", "content": "hi"}], "extra_headers": headers}
    if stream:
        with client.messages.stream(**kw) as s:
            final = s.get_final_message()
        assert final.usage.output_tokens == 80
    else:
        msg = client.messages.create(**kw)
        assert msg.usage.cache_read_input_tokens == 1000
    assert fake.requests[-1]["path"] == "/v1/messages"
    sent = fake.requests[-1]["headers"]  # this SDK version sends its key as a Bearer token
    assert "sk-ant-client" in (sent.get("x-api-key", "") + sent.get("authorization", ""))
    assert sent["anthropic-version"]  # forwarded as the client sent it
    [row] = proxy.rows(expect=1)
    assert (row["input_tokens"], row["cache_read_tokens"], row["cache_write_tokens"], row["output_tokens"]) == (
        300, 1000, 200, 80)
    assert row["tier"] == "highspeed" and row["endpoint"] == "messages"  # usage.speed = "fast"
    assert row["cost_units"] == units(expected_cost("kimi-k3.1-pro", "highspeed", 300, 80, 1000, 200))
    assert proxy.metric("llmmeter_tokens_total", model="kimi-k3.1-pro", tier="highspeed", type="cache_write") == 200


def test_tenant_keys_gate_every_request_and_never_reach_upstream(fake: FakeUpstream, serve: Any) -> None:
    key = "llmm-test-key-for-search-team"
    config = (f'[[tenant]]\nname = "search-team"\nkey_sha256 = ["{hashlib.sha256(key.encode()).hexdigest()}"]\n')
    proxy = serve(upstream=fake.base_url, config=config)
    body = {"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(proxy.base_url + "/chat/completions", json=body).status_code == 401
    bad = httpx.post(proxy.base_url + "/chat/completions", json=body, headers={"authorization": "Bearer nope"})
    assert bad.status_code == 401 and bad.json()["error"]["code"] == "invalid_api_key"
    anth = httpx.post(proxy.base_url + "/messages", json={**body, "max_tokens": 5}, headers={"x-api-key": "nope"})
    assert anth.status_code == 401 and anth.json()["type"] == "error"
    assert not fake.requests
    ok = OpenAI(base_url=proxy.base_url, api_key=key, max_retries=0).chat.completions.create(**body)
    assert ok.choices
    assert "authorization" not in fake.requests[-1]["headers"]  # the proxy key is never forwarded
    assert proxy.metric("llmmeter_requests_total", tenant="search-team", code="200") == 1
    assert proxy.rows(expect=1)[-1]["tenant"] == "search-team"
    proxy.stop()  # the refusals before a key is known are written per minute and reason, at the latest at shutdown
    rows = proxy.rows()
    assert sum(r["request_count"] for r in rows if r["tenant"] == "unauthenticated" and r["code"] == 401) == 3
    assert [(r["tenant"], r["code"]) for r in rows if r["tenant"] != "unauthenticated"] == [("search-team", 200)]
