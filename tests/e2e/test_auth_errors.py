"""A bad proxy key answers in each dialect's own words: Anthropic's `authentication_error` on
/v1/messages (as its own 401 does, so the anthropic SDK raises AuthenticationError), the OpenAI
shape elsewhere; the refusal's ledger record says no usage was reported or counted."""

from __future__ import annotations

import hashlib
from typing import Any

import anthropic
import httpx
import pytest

from tests.fake_upstream import FakeUpstream

KEY = "llmm-auth-test-key"
CONFIG = ('[server]\nmetrics_token = "auth-test-token"\n'
          f'[[tenant]]\nname = "team"\nkey_sha256 = ["{hashlib.sha256(KEY.encode()).hexdigest()}"]\n')


def test_a_bad_key_gets_each_dialects_authentication_error(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url, config=CONFIG)
    r = httpx.post(proxy.base_url + "/messages", headers={"x-api-key": "wrong"}, timeout=10,
                   json={"model": "claude-test", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 401
    assert r.json() == {"type": "error", "error": {"type": "authentication_error",
                                                   "message": "missing or unknown proxy key"}}
    client = anthropic.Anthropic(base_url=proxy.url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        client.messages.create(model="claude-test", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    oa = httpx.post(proxy.base_url + "/chat/completions", headers={"authorization": "Bearer wrong"}, timeout=10,
                    json={"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]})
    assert oa.status_code == 401
    assert (oa.json()["error"]["type"], oa.json()["error"]["code"]) == ("authentication_error", "invalid_api_key")
    assert not fake.requests
    proxy.stop()  # the open minute's refusals are written at shutdown
    rows = proxy.rows()
    assert rows and all((x["code"], x["outcome"], x["usage_source"]) == (401, "rejected", "none") for x in rows)
