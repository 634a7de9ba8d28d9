"""A real model behind llmmeter: llama.cpp's server with SmolLM2-135M, the official openai SDK.

Each test asks the same question twice with greedy decoding, once straight to llama.cpp and
once through llmmeter, so what a direct client gets is the reference for what the proxy relays.
llama.cpp reports usage on plain calls but ignores `stream_options.include_usage`, so a
stream's tokens are estimated and the record says so.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
from openai import OpenAI

from proxy.metering.estimate.estimator import Estimator, TiktokenCounter
from tests.realmodel.llama_server import MODEL_ALIAS, LlamaServer

# USD per million tokens for `smollm2` in tests/data/prices/test-models.toml.
INPUT_PRICE, OUTPUT_PRICE = Decimal("0.05"), Decimal("0.10")
MESSAGES = [{"role": "user", "content": "Say hello in five words."}]
# Short and greedy: little CPU, and the same answer every time.
GENERATE: dict[str, Any] = {"max_tokens": 8, "temperature": 0}


class _Tee(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, copy: bytearray) -> None:
        self._inner, self._copy = inner, copy

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._inner:
            self._copy += chunk
            yield chunk

    def close(self) -> None:
        self._inner.close()


class Recorder(httpx.BaseTransport):
    """httpx's own HTTP transport, keeping a copy of each response body exactly as received."""

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport()
        self.bodies: list[bytearray] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._inner.handle_request(request)
        body = bytearray()
        self.bodies.append(body)
        assert isinstance(response.stream, httpx.SyncByteStream)
        return httpx.Response(response.status_code, headers=response.headers,
                              stream=_Tee(response.stream, body), extensions=response.extensions)

    def close(self) -> None:
        self._inner.close()


def sdk(base_url: str, recorder: Recorder) -> OpenAI:
    return OpenAI(base_url=base_url, api_key="sk-unused", max_retries=0,
                  http_client=httpx.Client(transport=recorder, timeout=60))


def same_but_ids(body: bytes) -> bytes:
    """Each response has its own id and creation second; everything else must match."""
    body = re.sub(rb'"id": ?"chatcmpl-[0-9a-f-]+"', b'"id": "chatcmpl-X"', body)
    return re.sub(rb'"created": ?\d+', b'"created": 0', body)


def units(prompt: int, completion: int) -> int:
    usd = (prompt * INPUT_PRICE + completion * OUTPUT_PRICE) / 10**6
    assert usd * 10**10 == int(usd * 10**10)
    return int(usd * 10**10)


def exported(proxy: Any) -> dict[str, str]:
    out = proxy.cli("export", "--from", "2020-01-01", "--to", "2100-01-01", "--format", "csv",
                    "--db", f"sqlite:///{proxy.db}")
    assert out.returncode == 0, out.stderr
    [line] = list(csv.DictReader(io.StringIO(out.stdout)))
    return line


def test_plain_chat_is_metered_with_llamas_own_usage(llama: LlamaServer, serve: Any) -> None:
    direct_rec, via_rec = Recorder(), Recorder()
    direct = sdk(llama.base_url, direct_rec).chat.completions.create(
        model=MODEL_ALIAS, messages=MESSAGES, **GENERATE)
    proxy = serve(upstream=llama.base_url)
    via = sdk(proxy.base_url, via_rec).chat.completions.create(model=MODEL_ALIAS, messages=MESSAGES, **GENERATE)

    assert direct.usage is not None and direct.usage.prompt_tokens > 0 and direct.usage.completion_tokens > 0
    assert via.usage == direct.usage
    assert via.choices[0].message.content == direct.choices[0].message.content
    assert same_but_ids(bytes(via_rec.bodies[-1])) == same_but_ids(bytes(direct_rec.bodies[-1]))

    prompt, completion = direct.usage.prompt_tokens, direct.usage.completion_tokens
    [row] = proxy.rows(expect=1)
    assert (row["input_tokens"], row["cache_read_tokens"], row["cache_write_tokens"],
            row["output_tokens"], row["reasoning_tokens"]) == (prompt, 0, 0, completion, None)
    assert row["usage_source"] == "upstream" and row["model"] == MODEL_ALIAS and row["tier"] == "standard"
    assert (row["code"], row["outcome"], bool(row["stream"])) == (200, "ok", False)
    assert row["cost_units"] == units(prompt, completion)
    assert proxy.metric("llmmeter_tokens_total", model=MODEL_ALIAS, type="input") == prompt
    assert proxy.metric("llmmeter_tokens_total", model=MODEL_ALIAS, type="output") == completion

    line = exported(proxy)
    assert (line["input_tokens"], line["output_tokens"]) == (str(prompt), str(completion))
    assert line["usage_source"] == "upstream" and line["stream"] == "false"
    assert Decimal(line["cost_usd"]) == (prompt * INPUT_PRICE + completion * OUTPUT_PRICE) / 10**6


@pytest.mark.parametrize("asked_usage", [False, True], ids=["usage-not-asked", "usage-asked"])
def test_stream_is_relayed_unchanged_and_estimated(llama: LlamaServer, serve: Any, asked_usage: bool) -> None:
    kw: dict[str, Any] = {"model": MODEL_ALIAS, "messages": MESSAGES, "stream": True, **GENERATE}
    if asked_usage:
        kw["stream_options"] = {"include_usage": True}
    direct_rec, via_rec = Recorder(), Recorder()
    direct = list(sdk(llama.base_url, direct_rec).chat.completions.create(**kw))
    proxy = serve(upstream=llama.base_url)
    via = list(sdk(proxy.base_url, via_rec).chat.completions.create(**kw))

    # llama.cpp sends no usage even when asked (the proxy asks for it when the client did not).
    assert all(c.usage is None for c in direct)
    raw = bytes(via_rec.bodies[-1])
    assert raw.endswith(b"data: [DONE]\n\n")
    assert same_but_ids(raw) == same_but_ids(bytes(direct_rec.bodies[-1]))
    assert [c.model_dump(exclude={"id", "created"}) for c in via] == [
        c.model_dump(exclude={"id", "created"}) for c in direct]
    text = "".join(c.choices[0].delta.content or "" for c in via if c.choices)
    assert text.strip()

    [row] = proxy.rows(expect=1)
    assert row["usage_source"] == "estimated"
    # OpenAI's counting recipe with o200k: 3 per message + role + content, 3 to prime the reply.
    enc = tiktoken_encoding("o200k_base")  # tiktoken itself, the reference
    prompt = 3 + len(enc.encode("user")) + len(enc.encode(MESSAGES[0]["content"])) + 3
    completion = len(enc.encode(text))
    assert (row["input_tokens"], row["cache_read_tokens"], row["cache_write_tokens"],
            row["output_tokens"], row["reasoning_tokens"]) == (prompt, 0, 0, completion, None)
    assert (row["code"], row["outcome"], bool(row["stream"])) == (200, "ok", True)
    assert row["model"] == MODEL_ALIAS and row["cost_units"] == units(prompt, completion)
    assert row["ttft_ms"] is not None
    assert proxy.metric("llmmeter_estimated_requests_total", model=MODEL_ALIAS) == 1

    line = exported(proxy)
    assert line["usage_source"] == "estimated" and line["stream"] == "true"
    assert (line["input_tokens"], line["output_tokens"]) == (str(prompt), str(completion))


def tiktoken_encoding(name: str) -> Any:
    counter = Estimator(engine="tiktoken").load(name)
    assert isinstance(counter, TiktokenCounter)
    return counter.encoding
