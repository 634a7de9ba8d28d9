"""A stream that ends with no event at all (llama-server's answer to a prompt past its context)
is its own outcome, `upstream_empty`, flagged `empty_answer`: nothing estimated, nothing charged.
A real llmmeter between httpx and the fake upstream, its ledger read back."""

from __future__ import annotations

from typing import Any

import httpx

from tests.fake_upstream import FakeUpstream

BODY = {"model": "smollm2", "stream": True, "messages": [{"role": "user", "content": "a long prompt " * 200}]}


def test_an_empty_stream_is_not_charged(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    r = httpx.post(proxy.base_url + "/chat/completions", json=BODY, headers={"x-fake-empty-stream": "1"}, timeout=30)
    assert (r.status_code, r.content) == (200, b"")  # relayed as it came
    # The same request answered: estimated or reported, and charged, as ever.
    ok = httpx.post(proxy.base_url + "/chat/completions", json=BODY, headers={"x-fake-no-usage": "1"}, timeout=30)
    assert b"[DONE]" in ok.content
    empty, answered = proxy.rows(expect=2)
    assert (empty["code"], empty["outcome"], empty["usage_source"]) == (200, "upstream_empty", "none")
    assert "empty_answer" in empty["flags"] and "no_usage" not in empty["flags"]
    assert (empty["input_tokens"], empty["output_tokens"], empty["cost_units"]) == (0, 0, 0)
    assert (answered["outcome"], answered["usage_source"]) == ("ok", "estimated")
    assert answered["input_tokens"] > 0 and answered["cost_units"] > 0
    assert proxy.metric("llmmeter_requests_total", outcome="upstream_empty") == 1
    assert proxy.metric("llmmeter_estimated_requests_total") == 1


def test_errors_without_usage_say_none(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    plain = {**BODY, "stream": False}
    for status in (429, 500, 503):
        r = httpx.post(proxy.base_url + "/chat/completions", json=plain, headers={"x-fake-status": str(status)},
                       timeout=30)
        assert r.status_code == status
    # An error body that reports usage keeps it: the upstream's word.
    httpx.post(proxy.base_url + "/chat/completions", json=plain, timeout=30,
               headers={"x-fake-status": "400", "x-fake-error-usage": "1", "x-fake-usage": '{"prompt": 7}'})
    rows = proxy.rows(expect=4)
    assert [(x["code"], x["usage_source"], x["input_tokens"]) for x in rows] == [
        (429, "none", 0), (500, "none", 0), (503, "none", 0), (400, "upstream", 7)]
