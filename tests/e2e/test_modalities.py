"""Audio and image tokens: providers bill them at rates no price entry holds, so a record whose
answer reports them says so (flag, metering fault) instead of passing a text-rate cost as exact.

The official openai SDK -> a real llmmeter -> the fake upstream, which reports the usage shape
OpenAI documents for audio answers (audio_tokens inside prompt_tokens / completion_tokens).
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from openai import OpenAI

from tests.e2e.test_metering import units
from tests.fake_upstream import FakeUpstream

MSGS: Any = [{"role": "user", "content": "hi"}]


def _client(base_url: str) -> OpenAI:
    return OpenAI(base_url=base_url, api_key="sk-client-key", max_retries=0)


def _usage(**counts: int) -> dict[str, str]:
    return {"x-fake-usage": json.dumps(counts)}


def test_audio_tokens_flag_the_record_and_count_a_fault(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    _client(proxy.base_url).chat.completions.create(
        model="gpt-test", messages=MSGS,
        extra_headers=_usage(prompt=2000, completion=2000, audio_prompt=2000, audio_completion=2000))
    [row] = proxy.rows(expect=1)
    assert "audio_unpriced" in row["flags"].split(",")
    # The tokens stay as reported; their cost is the text rate's (gpt-test: 1.50 / 6.00), a lower bound.
    assert (row["input_tokens"], row["output_tokens"]) == (2000, 2000)
    assert row["cost_units"] == units(Decimal(2000 * 150 + 2000 * 600) / 10**8)
    assert proxy.metric("llmmeter_metering_faults_total", kind="audio_unpriced") == 1


def test_output_audio_alone_and_streamed_is_flagged(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    list(_client(proxy.base_url).chat.completions.create(
        model="gpt-test", messages=MSGS, stream=True, stream_options={"include_usage": True},
        extra_headers=_usage(prompt=10, completion=500, audio_completion=480)))
    [row] = proxy.rows(expect=1)
    assert "audio_unpriced" in row["flags"].split(",")
    assert proxy.metric("llmmeter_metering_faults_total", kind="audio_unpriced") == 1


def test_image_and_audio_tokens_on_the_responses_api(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    client = _client(proxy.base_url)
    client.responses.create(model="gpt-test", input="hi", extra_headers=_usage(prompt=900, completion=5,
                                                                                image_prompt=765))
    list(client.responses.create(model="gpt-test", input="hi", stream=True,
                                 extra_headers=_usage(prompt=300, completion=200, audio_completion=150)))
    first, second = proxy.rows(expect=2)
    assert "image_unpriced" in first["flags"].split(",") and "audio_unpriced" not in first["flags"]
    assert "audio_unpriced" in second["flags"].split(",") and "image_unpriced" not in second["flags"]
    assert proxy.metric("llmmeter_metering_faults_total", kind="image_unpriced") == 1
    assert proxy.metric("llmmeter_metering_faults_total", kind="audio_unpriced") == 1


def test_zero_audio_tokens_are_no_audio(fake: FakeUpstream, serve: Any) -> None:
    # OpenAI reports audio_tokens: 0 (and image_tokens: 0) on every text answer.
    proxy = serve(upstream=fake.base_url)
    _client(proxy.base_url).chat.completions.create(model="gpt-test", messages=MSGS,
                                                    extra_headers=_usage(prompt=20, completion=3, image_prompt=0))
    [row] = proxy.rows(expect=1)
    assert "unpriced" not in (row["flags"] or "")
    assert proxy.metric("llmmeter_metering_faults_total", kind="audio_unpriced") == 0
