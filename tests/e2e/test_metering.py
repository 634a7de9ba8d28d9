"""The official openai SDK -> a real llmmeter -> a real fake upstream: exact tokens and dollars.

Every expected number is computed here from the usage the upstream was told to report
and the price table, independently of llmmeter's own code.
"""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal
from typing import Any

import pytest
from openai import OpenAI

from proxy.metering.estimate.estimator import Estimator, TiktokenCounter
from tests.fake_upstream import FakeUpstream

# (input, output, cache_read, cache_write) USD per million, as in the tables the test uses.
PRICES = {
    ("kimi-k3.1-pro", "standard"): ("2.00", "10.00", "0.20", "2.00"),
    ("kimi-k3.1-pro", "highspeed"): ("4.00", "20.00", "0.20", "4.00"),
    ("gpt-test", "standard"): ("1.50", "6.00", "0.15", "1.875"),
    ("gpt-test", "highspeed"): ("3.00", "12.00", "0.30", "3.75"),
    ("deepseek-test", "standard"): ("0.27", "1.10", "0.07", "0"),
    ("llama-test", "standard"): ("0.10", "0.30", "0", "0"),
    ("text-embedding-test", "standard"): ("0.02", "0", "0", "0"),
}


def expected_cost(model: str, tier: str, inp: int, out: int, cr: int, cw: int) -> Decimal:
    pi, po, pr, pw = (Decimal(p) for p in PRICES[(model, tier)])
    return (inp * pi + out * po + cr * pr + cw * pw) / Decimal(10**6)


def units(usd: Decimal) -> int:
    value = usd * 10**10
    assert value == value.to_integral_value()
    return int(value)


# model, what the upstream reports, expected (input, cache_read, cache_write, output, reasoning)
DIALECTS: list[tuple[str, dict[str, int], tuple[int, int, int, int, int | None]]] = [
    # OpenAI: prompt_tokens includes cached and cache-write tokens; reasoning is part of output.
    ("gpt-test", {"prompt": 5000, "cached": 3000, "cache_write": 500, "completion": 700, "reasoning": 300},
     (1500, 3000, 500, 700, 300)),
    # Moonshot: usage.cached_tokens at the top level.
    ("kimi-k3.1-pro", {"prompt": 1200, "cached": 1000, "completion": 50}, (200, 1000, 0, 50, None)),
    # DeepSeek: prompt_cache_hit_tokens / prompt_cache_miss_tokens.
    ("deepseek-test", {"prompt": 900, "cached": 600, "completion": 40, "reasoning": 12},
     (300, 600, 0, 40, 12)),
    # vLLM / llama.cpp: plain prompt and completion counts.
    ("llama-test", {"prompt": 77, "completion": 9}, (77, 0, 0, 9, None)),
]


def _client(base_url: str, **kw: Any) -> OpenAI:
    return OpenAI(base_url=base_url, api_key="sk-client-key", max_retries=0, **kw)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize(("model", "usage", "want"), DIALECTS, ids=[d[0] for d in DIALECTS])
def test_chat_tokens_and_cost_are_exact(fake: FakeUpstream, serve: Any, model: str,
                                        usage: dict[str, int], want: tuple[int, ...], stream: bool) -> None:
    proxy = serve(upstream=fake.base_url)
    client = _client(proxy.base_url)
    headers = {"x-fake-usage": json.dumps(usage)}
    messages = [{"role": "user", "content": "hello"}]
    if stream:
        chunks = list(client.chat.completions.create(model=model, messages=messages, stream=True,
                                                     extra_headers=headers))
        # The client did not ask for usage: the proxy asked for it and removed the usage chunk.
        assert all(c.usage is None for c in chunks)
        assert all(c.choices for c in chunks)
        assert "".join(c.choices[0].delta.content or "" for c in chunks).strip()
        sent = fake.requests[-1]["json"]
        assert sent["stream_options"] == {"include_usage": True}
    else:
        reply = client.chat.completions.create(model=model, messages=messages, extra_headers=headers)
        assert reply.usage is not None and reply.usage.prompt_tokens == usage["prompt"]

    inp, cr, cw, out, reasoning = want
    usd = expected_cost(model, "standard", inp, out, cr, cw)
    [row] = proxy.rows(expect=1)
    assert (row["input_tokens"], row["cache_read_tokens"], row["cache_write_tokens"],
            row["output_tokens"], row["reasoning_tokens"]) == want
    assert row["cost_units"] == units(usd)
    assert row["usage_source"] == "upstream"
    assert row["model"] == model and row["tier"] == "standard" and row["endpoint"] == "chat"
    assert bool(row["stream"]) is stream and row["code"] == 200 and row["outcome"] == "ok"

    for kind, n in (("input", inp), ("cache_read", cr), ("cache_write", cw), ("output", out)):
        assert proxy.metric("llmmeter_tokens_total", model=model, type=kind) == n
    assert proxy.metric("llmmeter_cost_usd_total", model=model) == pytest.approx(float(usd), rel=1e-12)
    assert proxy.metric("llmmeter_requests_total", model=model, endpoint="chat", code="200",
                        outcome="ok") == 1
    if reasoning:
        assert proxy.metric("llmmeter_reasoning_tokens_total", model=model) == reasoning
    samples = proxy.metrics()
    # A category the request did not use has no series at all (as prometheus_client would show it).
    kinds = {dict(lbls)["type"] for (name, lbls) in samples if name == "llmmeter_tokens_total"}
    assert kinds == {kind for kind, n in (("input", inp), ("cache_read", cr), ("cache_write", cw),
                                          ("output", out)) if n}
    side = inp + cr + cw
    assert proxy.metric("llmmeter_request_input_tokens_count", model=model) == 1
    assert proxy.metric("llmmeter_request_input_tokens_sum", model=model) == side
    assert proxy.metric("llmmeter_request_output_tokens_sum", model=model) == out
    for le in ("256.0", "1024.0", "4096.0", "16384.0"):  # cumulative: 1 from the first bound at or above
        assert proxy.metric("llmmeter_request_input_tokens_bucket", model=model, le=le) == (side <= float(le))
    ttft = [name for (name, _) in samples if name.startswith("llmmeter_time_to_first_token_seconds_count")]
    assert len(ttft) == (1 if stream else 0)

    export = proxy.cli("export", "--from", "2020-01-01", "--to", "2100-01-01", "--format", "csv",
                       "--db", proxy.db_url)
    assert export.returncode == 0, export.stderr
    [line] = list(csv.DictReader(io.StringIO(export.stdout)))
    assert Decimal(line["cost_usd"]) == usd
    assert line["input_tokens"] == str(inp) and line["cache_read_tokens"] == str(cr)
    assert line["stream"] == ("true" if stream else "false")


def test_client_asked_usage_chunk_is_kept(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    chunks = list(_client(proxy.base_url).chat.completions.create(
        model="kimi-k3.1-pro", messages=[{"role": "user", "content": "hi"}], stream=True,
        stream_options={"include_usage": True},
        extra_headers={"x-fake-usage": json.dumps({"prompt": 10, "completion": 5})}))
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5
    assert chunks[-1].choices == []
    [row] = proxy.rows(expect=1)
    assert row["input_tokens"] == 10 and row["output_tokens"] == 5


def test_usage_on_a_chunk_with_choices_is_read(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    chunks = list(_client(proxy.base_url).chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "hi"}], stream=True,
        extra_headers={"x-fake-usage": json.dumps({"prompt": 40, "completion": 4}),
                       "x-fake-usage-in-choice": "1"}))
    assert any(c.choices for c in chunks)
    [row] = proxy.rows(expect=1)
    assert row["input_tokens"] == 40 and row["output_tokens"] == 4


def test_highspeed_tier_from_response(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    _client(proxy.base_url).chat.completions.create(
        model="kimi-k3.1-pro", messages=[{"role": "user", "content": "hi"}],
        extra_headers={"x-fake-usage": json.dumps({"prompt": 1_000_000, "completion": 100_000}),
                       "x-fake-service-tier": "priority"})
    [row] = proxy.rows(expect=1)
    assert row["tier"] == "highspeed"
    assert row["cost_units"] == units(Decimal("4") + Decimal("2"))  # 1M x $4 + 0.1M x $20


def test_legacy_completions_and_embeddings(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    client = _client(proxy.base_url)
    client.completions.create(model="llama-test", prompt="once upon",
                              extra_headers={"x-fake-usage": json.dumps({"prompt": 3, "completion": 7})})
    list(client.completions.create(model="llama-test", prompt="once upon", stream=True,
                                   extra_headers={"x-fake-usage": json.dumps({"prompt": 3, "completion": 8})}))
    emb = client.embeddings.create(model="text-embedding-test", input=["a", "b"],
                                   extra_headers={"x-fake-usage": json.dumps({"prompt": 2000})})
    assert len(emb.data) == 2
    rows = proxy.rows(expect=3)
    by = [(r["endpoint"], bool(r["stream"]), r["input_tokens"], r["output_tokens"]) for r in rows]
    assert by == [("completions", False, 3, 7), ("completions", True, 3, 8), ("embeddings", False, 2000, 0)]
    assert rows[2]["cost_units"] == units(expected_cost("text-embedding-test", "standard", 2000, 0, 0, 0))


def test_no_usage_is_estimated_and_marked(fake: FakeUpstream, serve: Any) -> None:
    """Like llama-cpp-python, the upstream ignores include_usage and sends no llama-server timings:
    the proxy counts with tiktoken."""
    proxy = serve(upstream=fake.base_url)
    chunks = list(_client(proxy.base_url).chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "Say hello in five words."}],
        stream=True, extra_headers={"x-fake-no-usage": "1", "x-fake-chunks": "6"}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    [row] = proxy.rows(expect=1)
    assert row["usage_source"] == "estimated"
    enc = tiktoken_encoding("o200k_base")  # tiktoken itself, the reference
    # OpenAI's recipe: 3 per message + role + content, + 3 to prime the reply.
    assert row["input_tokens"] == 3 + len(enc.encode("user")) + len(enc.encode("Say hello in five words.")) + 3
    assert row["output_tokens"] == len(enc.encode(text))
    assert proxy.metric("llmmeter_estimated_requests_total", model="smollm2") == 1


def test_unknown_model_is_forwarded_and_counted_unpriced(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    _client(proxy.base_url).chat.completions.create(
        model="mystery-model-9", messages=[{"role": "user", "content": "hi"}],
        extra_headers={"x-fake-usage": json.dumps({"prompt": 5, "completion": 5})})
    [row] = proxy.rows(expect=1)
    assert row["cost_units"] is None and row["model"] is None
    assert row["model_requested"] == "mystery-model-9"
    assert proxy.metric("llmmeter_unpriced_requests_total", model="other") == 1
    # A client-chosen name never becomes a label value.
    assert "mystery-model-9" not in str(proxy.metrics())


def test_price_gauges_show_prices_in_force(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    m = proxy.metrics()
    key = ("llmmeter_price_per_million_usd", (("model", "kimi-k3.1-pro"), ("tier", "highspeed"), ("type", "output")))
    assert m[key] == 20.0


def tiktoken_encoding(name: str) -> Any:
    counter = Estimator(engine="tiktoken").load(name)
    assert isinstance(counter, TiktokenCounter)
    return counter.encoding
