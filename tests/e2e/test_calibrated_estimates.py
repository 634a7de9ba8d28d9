"""Streams a self-hosted server does not report usage for are estimated, and the estimate learns
the chat template's tokens from the same upstream's plain calls, which it reports; llama-server's
own `timings` on its last stream chunk are read when there is no usage. A real llmmeter between
httpx and the fake upstream, its ledger read back."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.fake_upstream import FakeUpstream

MESSAGES = [{"role": "user", "content": "Say hello in five words."}]


def chat(proxy: Any, model: str, stream: bool, headers: dict[str, str]) -> bytes:
    r = httpx.post(proxy.base_url + "/chat/completions", json={"model": model, "messages": MESSAGES,
                                                                 "stream": stream}, headers=headers, timeout=30)
    assert r.status_code == 200
    return r.content


def test_estimates_learn_the_template_from_reported_calls(fake: FakeUpstream, serve: Any) -> None:
    # smollm2 through the fake: no usage on streams (as llama-cpp-python), no timings either.
    proxy = serve(upstream=fake.base_url)
    chat(proxy, "smollm2", True, {"x-fake-no-usage": "1"})
    [first] = proxy.rows(expect=1)
    assert first["usage_source"] == "estimated" and "estimate_calibrated" not in first["flags"]
    recipe = first["input_tokens"]  # OpenAI's recipe: what the template adds is missing
    # The server counts 23 template tokens more on its plain calls, and one odd call.
    for prompt in (recipe + 23, recipe + 23, recipe + 400, recipe + 22):
        chat(proxy, "smollm2", False, {"x-fake-usage": json.dumps({"prompt": prompt, "completion": 5})})
    chat(proxy, "smollm2", True, {"x-fake-no-usage": "1"})
    rows = proxy.rows(expect=6)
    assert [r["usage_source"] for r in rows] == ["estimated", *["upstream"] * 4, "estimated"]
    last = rows[-1]
    assert "estimate_calibrated" in last["flags"].split(",")
    assert last["input_tokens"] == recipe + 23  # the median of 23, 23, 400, 22 (the lower middle)
    assert last["output_tokens"] == first["output_tokens"]  # the output is counted as before


def test_llama_server_timings_are_its_stream_usage(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    # llama* models: the last chunk carries llama-server's timings, and no usage chunk is sent.
    body = chat(proxy, "llama-test", True, {"x-fake-no-usage": "1", "x-fake-chunks": "6",
                                            "x-fake-usage": json.dumps({"prompt": 36, "cached": 10})})
    assert b'"timings"' in body  # relayed as it came
    [row] = proxy.rows(expect=1)
    assert (row["usage_source"], row["input_tokens"], row["cache_read_tokens"], row["output_tokens"]) == (
        "upstream", 26, 10, 6)
    assert "usage_from_timings" in row["flags"].split(",")
