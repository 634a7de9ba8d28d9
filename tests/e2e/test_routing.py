"""Hybrid set-up: API and self-hosted upstreams behind one meter, routed by model; secrets stay secret."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openai import NotFoundError, OpenAI

from tests.e2e.test_metering import expected_cost, units
from tests.fake_upstream import FakeUpstream

MOONSHOT_KEY = "sk-moonshot-upstream-secret-123"
PROXY_KEY = "llmm-proxy-key-of-the-search-team-456"


@pytest.fixture
def selfhosted() -> Iterator[FakeUpstream]:
    with FakeUpstream() as upstream:
        yield upstream


def hybrid_config(api: FakeUpstream, local: FakeUpstream, with_keys: bool) -> str:
    # First match wins: the self-hosted model name also matches "kimi-*", so it comes first.
    text = f"""
[[upstream]]
name = "selfhosted"
base_url = "{local.base_url}"
models = ["kimi-k3.1-pro-selfhosted", "llama-*"]
self_hosted = true

[[upstream]]
name = "moonshot"
base_url = "{api.base_url}"
api_key_env = "MOONSHOT_API_KEY"
models = ["kimi-*"]
"""
    if with_keys:
        digest = hashlib.sha256(PROXY_KEY.encode()).hexdigest()
        text += f'\n[[tenant]]\nname = "search-team"\nkey_sha256 = ["{digest}"]\n'
    return text


def test_routes_by_model_and_prices_the_selfhosted_upstream_its_own_way(
        fake: FakeUpstream, selfhosted: FakeUpstream, serve: Any) -> None:
    proxy = serve(config=hybrid_config(fake, selfhosted, with_keys=False), env={"MOONSHOT_API_KEY": MOONSHOT_KEY})
    client = OpenAI(base_url=proxy.base_url, api_key="sk-client", max_retries=0)
    usage = {"x-fake-usage": json.dumps({"prompt": 1000, "completion": 100})}
    msgs = [{"role": "user", "content": "hi"}]
    client.chat.completions.create(model="kimi-k3.1-pro", messages=msgs, extra_headers=usage)  # type: ignore[arg-type]
    client.chat.completions.create(model="kimi-k3.1-pro-selfhosted", messages=msgs,  # type: ignore[arg-type]
                                   extra_headers=usage)
    with pytest.raises(NotFoundError) as e:
        client.chat.completions.create(model="gpt-4o", messages=msgs)  # type: ignore[arg-type]
    assert e.value.body["code"] == "model_not_found"  # type: ignore[index]

    assert [r["path"] for r in fake.requests] == ["/v1/chat/completions"]
    assert fake.requests[0]["headers"]["authorization"] == f"Bearer {MOONSHOT_KEY}"
    assert [r["json"]["model"] for r in selfhosted.requests] == ["kimi-k3.1-pro-selfhosted"]
    assert selfhosted.requests[0]["headers"]["authorization"] == "Bearer sk-client"  # no key of its own

    api, local, rejected = proxy.rows(expect=3)
    assert (api["upstream"], api["model"]) == ("moonshot", "kimi-k3.1-pro")
    assert api["cost_units"] == units(expected_cost("kimi-k3.1-pro", "standard", 1000, 100, 0, 0))
    # Same canonical model, the self-hosted entry's internal rate: 1000 x 0.50 + 100 x 1.00 per million.
    assert (local["upstream"], local["model"]) == ("selfhosted", "kimi-k3.1-pro")
    assert local["cost_units"] == (1000 * 5_000 + 100 * 10_000)
    assert (rejected["code"], rejected["outcome"], rejected["model_requested"]) == (404, "rejected", "gpt-4o")
    assert proxy.metric("llmmeter_requests_total", upstream="selfhosted", code="200") == 1
    assert proxy.metric("llmmeter_requests_total", upstream="moonshot", code="200") == 1


def test_no_key_appears_in_logs_metrics_ledger_or_errors(fake: FakeUpstream, selfhosted: FakeUpstream,
                                                          serve: Any) -> None:
    proxy = serve(config=hybrid_config(fake, selfhosted, with_keys=True), env={"MOONSHOT_API_KEY": MOONSHOT_KEY})
    client = OpenAI(base_url=proxy.base_url, api_key=PROXY_KEY, max_retries=0)
    client.chat.completions.create(model="kimi-k3.1-pro", messages=[{"role": "user", "content": "hi"}])
    list(client.chat.completions.create(model="kimi-k3.1-pro", stream=True,
                                        messages=[{"role": "user", "content": "hi"}]))
    errors = [httpx.post(proxy.base_url + "/chat/completions", json={"model": "kimi-k3.1-pro"},
                         headers={"authorization": f"Bearer {PROXY_KEY}x"}).text,
              httpx.post(proxy.base_url + "/chat/completions", content=b"{",
                         headers={"authorization": f"Bearer {PROXY_KEY}"}).text,
              httpx.post(proxy.base_url + "/chat/completions", json={"model": "kimi-k3.1-pro"},
                         headers={"authorization": f"Bearer {PROXY_KEY}", "x-fake-status": "500"}).text]
    sent = [r["headers"].get("authorization", "") for r in fake.requests]
    assert sent == [f"Bearer {MOONSHOT_KEY}"] * 3  # the proxy key never goes upstream
    rows = proxy.rows(expect=4)  # the bad key's 401 joins its minute's aggregated record
    everything = "\n".join([proxy.output(), httpx.get(proxy.url + "/metrics").text, json.dumps(rows, default=str),
                            *errors])
    for p in proxy.tmp.rglob("*"):  # the ledger, its journal, everything the proxy wrote
        if p.is_file():
            everything += p.read_bytes().decode("latin-1")
    for secret in (PROXY_KEY, MOONSHOT_KEY, MOONSHOT_KEY[3:], PROXY_KEY[5:]):
        assert secret not in everything
    assert {r["tenant"] for r in rows if r["code"] != 401} == {"search-team"}
