"""OTLP export against a real receiver (docs/otel.md): a running llmmeter, the official OpenAI
and Anthropic SDKs, and every span attribute checked against the ledger row of the same call,
under both attribute sets; W3C trace context through to the upstream; a collector that is down
costs no request and its dropped spans are counted."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import anthropic
import httpx
import pytest
from openai import OpenAI

from tests.fake_upstream import FakeUpstream
from tests.serve import free_port
from tests.strict import require

if TYPE_CHECKING:
    from tests.otel.receiver import Received, Receiver

OTEL_MODULES = ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http", "opentelemetry.proto")
CLIENT_TRACE, CLIENT_SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
OPERATIONS = {"chat": "chat", "messages": "chat"}
# The SDK's own variables: spans leave every 50 ms, metrics every 200 ms.
FAST_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_METRIC_EXPORT_INTERVAL": "200"}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    require(all(importlib.util.find_spec(m) is not None for m in OTEL_MODULES),
            "the otel extra is not installed (pip install 'llmmeter[otel]')")
    from tests.otel.receiver import Receiver

    with Receiver() as r:
        yield r


def expected(row: dict[str, Any], latest: bool) -> dict[str, Any]:
    """What the span must say, written from the ledger row (not from llmmeter's own code)."""
    a: dict[str, Any] = {
        "gen_ai.operation.name": OPERATIONS[row["endpoint"]],
        "gen_ai.provider.name" if latest else "gen_ai.system": row["upstream"],
        "gen_ai.request.model": row["model_requested"],
        "llmmeter.tenant": row["tenant"], "llmmeter.outcome": row["outcome"],
        "llmmeter.usage_source": {"upstream": "reported", "estimated": "estimated", "none": "none"}[
            row["usage_source"]],
        "llmmeter.record_id": row["id"], "http.response.status_code": row["code"],
    }
    for key, column in (("gen_ai.response.model", "response_model"), ("gen_ai.response.id", "upstream_request_id"),
                        ("llmmeter.tag", "tag"), ("llmmeter.tier", "tier")):
        if row[column] is not None:
            a[key] = row[column]
    if row["usage_source"] != "none":  # a failed call spent nothing it was told of: no counts, not 0
        a["gen_ai.usage.input_tokens"] = (row["input_tokens"] + row["cache_read_tokens"]
                                          + row["cache_write_tokens"] + row["cache_write_1h_tokens"])
        a["gen_ai.usage.output_tokens"] = row["output_tokens"]
        a["gen_ai.usage.cache_read.input_tokens"] = row["cache_read_tokens"]
        a["gen_ai.usage.cache_creation.input_tokens"] = row["cache_write_tokens"] + row["cache_write_1h_tokens"]
    if row["reasoning_tokens"] is not None:
        a["gen_ai.usage.reasoning.output_tokens"] = row["reasoning_tokens"]
    if row["cost_units"] is not None:
        usd = Decimal(row["cost_units"]) / 10**10
        a.update({"gen_ai.usage.cost.amount": float(usd), "gen_ai.usage.cost.currency": "USD",
                  "gen_ai.usage.cost.source": "local", "llmmeter.cost_usd": str(usd)})
    if row["price_effective_from"] is not None:
        # The ledger keeps microseconds since the epoch; price entries start on a whole second.
        start = datetime.fromtimestamp(row["price_effective_from"] // 10**6, UTC)
        a["llmmeter.price_version"] = start.strftime("%Y-%m-%dT%H:%M:%SZ")
    if row["outcome"] != "ok":
        a["error.type"] = row["outcome"]
    return a


def calls(proxy: Any) -> None:
    """OpenAI and Anthropic, plain and streamed, one estimated (no usage), one failed (upstream 500)."""
    oai = OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    usage = {"x-fake-usage": json.dumps({"prompt": 5000, "cached": 3000, "completion": 700, "reasoning": 300})}
    msgs = [{"role": "user", "content": "secret prompt words"}]
    oai.chat.completions.create(model="gpt-test", messages=msgs, extra_headers={
        **usage, "traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01", "tracestate": "vendor=1",
        "x-llmmeter-tag": "rag"})
    list(oai.chat.completions.create(model="gpt-test", messages=msgs, stream=True,
                                     stream_options={"include_usage": True}, extra_headers=usage))
    oai.chat.completions.create(model="gpt-test", messages=msgs, extra_headers={"x-fake-no-usage": "1"})
    with pytest.raises(Exception) as failed:
        oai.chat.completions.create(model="gpt-test", messages=msgs, extra_headers={"x-fake-status": "500"})
    assert not isinstance(failed.value, AssertionError)
    ant = anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant", max_retries=0)
    ausage = {"x-fake-usage": json.dumps({"prompt": 1500, "cached": 1000, "cache_write": 200, "completion": 80})}
    kw: dict[str, Any] = {"model": "kimi-k3.1-pro", "max_tokens": 100, "messages": msgs, "extra_headers": ausage}
    ant.messages.create(**kw)
    with ant.messages.stream(**kw) as s:
        s.get_final_message()


def by_record(spans: list[Received], kind: int) -> dict[str, Received]:
    return {s.attributes["llmmeter.record_id"]: s for s in spans if s.kind == kind}


@pytest.mark.parametrize("latest", [False, True], ids=["default", "latest_experimental"])
def test_every_span_attribute_is_the_ledgers(fake: FakeUpstream, serve: Any, receiver: Receiver,
                                             latest: bool) -> None:
    from tests.otel.receiver import CLIENT, SERVER

    env = {**FAST_EXPORT, **({"OTEL_SEMCONV_STABILITY_OPT_IN": "http,gen_ai_latest_experimental"} if latest else {})}
    proxy = serve(upstream=fake.base_url, config=f'[otel]\nendpoint = "{receiver.url}"\nservice_name = "gw"\n',
                  env=env)
    calls(proxy)
    rows = proxy.rows(expect=6)
    assert len(rows) == 6
    assert {(r["endpoint"], r["stream"], r["usage_source"], r["outcome"]) for r in rows} == {
        ("chat", 0, "upstream", "ok"), ("chat", 1, "upstream", "ok"), ("chat", 0, "estimated", "ok"),
        ("chat", 0, "none", "upstream_http_error"), ("messages", 0, "upstream", "ok"),
        ("messages", 1, "upstream", "ok")}
    spans = receiver.wait_for(lambda got: len(got) >= 12)
    servers, clients = by_record(spans, SERVER), by_record(spans, CLIENT)
    assert len(spans) == 12 and set(servers) == set(clients) == {r["id"] for r in rows}
    for row in rows:
        server, client = servers[row["id"]], clients[row["id"]]
        assert server.attributes == expected(row, latest), row
        assert client.attributes == server.attributes
        assert (client.trace_id, client.parent_span_id) == (server.trace_id, server.span_id)
        assert server.start_ns <= client.start_ns <= client.end_ns <= server.end_ns
        assert server.end_ns - server.start_ns == row["duration_ms"] * 1_000_000
        assert server.resource["service.name"] == "gw"
        assert server.status_code == (2 if row["outcome"] != "ok" else 0)  # STATUS_CODE_ERROR / UNSET
        assert not any("secret" in str(v) or "tok0" in str(v) for v in server.attributes.values())
    # The client's trace context: llmmeter's SERVER span is its child, and the upstream got the CLIENT span.
    [tagged] = [r for r in rows if r["tag"] == "rag"]
    server, client = servers[tagged["id"]], clients[tagged["id"]]
    assert (server.trace_id, server.parent_span_id) == (CLIENT_TRACE, CLIENT_SPAN)
    sent = [q["headers"] for q in fake.requests if q["headers"].get("tracestate")]
    assert [(h["traceparent"], h["tracestate"]) for h in sent] == [(f"00-{CLIENT_TRACE}-{client.span_id}-01",
                                                                    "vendor=1")]
    untraced = {s.trace_id for s in servers.values()} - {CLIENT_TRACE}
    assert len(untraced) == 5  # a client that sent no context: a trace of its own for each call
    check_metrics(receiver, rows, latest)


def check_metrics(receiver: Receiver, rows: list[dict[str, Any]], latest: bool) -> None:
    """The GenAI metrics: tokens by type, durations and times to first token, as the ledger's."""
    counted = [r for r in rows if r["usage_source"] != "none"]
    inputs = sum(r["input_tokens"] + r["cache_read_tokens"] + r["cache_write_tokens"] + r["cache_write_1h_tokens"]
                 for r in counted)
    outputs = sum(r["output_tokens"] for r in counted)
    streams = [r for r in rows if r["ttft_ms"] is not None]
    want = {("gen_ai.client.token.usage", "input"): (len(counted), inputs),
            ("gen_ai.client.token.usage", "output"): (len(counted), outputs)}

    def arrived() -> bool:
        return (all(receiver.histogram(name, **{"gen_ai.token.type": kind}) == (n, total)
                    for (name, kind), (n, total) in want.items())
                and receiver.histogram("gen_ai.server.request.duration")[0] == len(rows)
                and receiver.histogram("gen_ai.server.time_to_first_token")[0] == len(streams))

    receiver.wait_for(lambda _: arrived())
    assert arrived(), receiver.histograms
    duration = receiver.histogram("gen_ai.server.request.duration")[1]
    assert duration == pytest.approx(sum(r["duration_ms"] for r in rows) / 1000)
    [failed] = [r for r in rows if r["outcome"] != "ok"]
    assert receiver.histogram("gen_ai.server.request.duration", **{"error.type": failed["outcome"]})[0] == 1
    key = "gen_ai.provider.name" if latest else "gen_ai.system"
    assert {dict(a).get(key) for (_, a) in receiver.histograms} == {rows[0]["upstream"]}
    # Bounded attributes only: the price table's model, never tenants, tags or ids.
    assert {k for (_, a) in receiver.histograms for k, _ in a} <= {
        "gen_ai.operation.name", key, "gen_ai.request.model", "gen_ai.token.type", "error.type"}


def test_with_export_off_the_clients_trace_context_passes_unchanged(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    parent = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
    r = httpx.post(proxy.base_url + "/chat/completions", json={"model": "gpt-test", "messages": []},
                   headers={"traceparent": parent, "tracestate": "vendor=1"})
    assert r.status_code == 200
    sent = fake.requests[-1]["headers"]
    assert (sent["traceparent"], sent["tracestate"]) == (parent, "vendor=1")
    assert proxy.metric("llmmeter_otel_dropped_spans_total") == 0


def test_a_collector_that_is_down_costs_no_request_and_drops_are_counted(
        fake: FakeUpstream, serve: Any, receiver: Receiver) -> None:
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    proxy = serve(upstream=fake.base_url, config=f'[otel]\nendpoint = "{down}"\nqueue_size = 2\n', env=FAST_EXPORT)
    assert proxy.metric("llmmeter_otel_dropped_spans_total") == 0
    body = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}
    sent = 0
    while proxy.metric("llmmeter_otel_dropped_spans_total") == 0 and sent < 200:
        assert httpx.post(proxy.base_url + "/chat/completions", json=body, timeout=30).status_code == 200
        sent += 1
    assert proxy.metric("llmmeter_otel_dropped_spans_total") > 0
    assert len(proxy.rows(expect=sent)) == sent


def test_a_client_that_leaves_and_a_provider_cost_are_traced_as_recorded(
        fake: FakeUpstream, serve: Any, receiver: Receiver) -> None:
    from tests.otel.receiver import CLIENT, SERVER

    proxy = serve(upstream=fake.base_url, config=f'[otel]\nendpoint = "{receiver.url}"\n', env=FAST_EXPORT)
    body = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with httpx.stream("POST", proxy.base_url + "/chat/completions", json=body, timeout=30,
                      headers={"x-fake-chunks": "3000", "x-fake-delay-ms": "100"}) as r:  # 300 s in all
        parts = r.iter_raw()
        assert next(parts)
    [left] = proxy.rows(expect=1)
    assert (left["outcome"], left["usage_source"]) == ("client_closed", "estimated")
    # OpenRouter's usage.cost: the upstream's own figure, on the CLIENT span only.
    usage = json.dumps({"prompt": 100, "completion": 10, "cost": "0.0004"})
    OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0).chat.completions.create(
        model="gpt-test", messages=body["messages"], extra_headers={"x-fake-usage": usage})
    rows = proxy.rows(expect=2)
    [costed] = [r for r in rows if r["id"] != left["id"]]
    assert costed["provider_cost_units"] == 4_000_000
    spans = receiver.wait_for(lambda got: len(got) >= 4)
    servers, clients = by_record(spans, SERVER), by_record(spans, CLIENT)
    for row in rows:
        assert servers[row["id"]].attributes == expected(row, latest=False), row
    assert clients[left["id"]].attributes == servers[left["id"]].attributes
    assert clients[costed["id"]].attributes == {**servers[costed["id"]].attributes, "gen_ai.usage.cost.amount": 0.0004,
                                                 "gen_ai.usage.cost.source": "provider"}


def test_sample_ratio_zero_keeps_only_the_traces_a_client_sampled(
        fake: FakeUpstream, serve: Any, receiver: Receiver) -> None:
    proxy = serve(upstream=fake.base_url, config=f'[otel]\nendpoint = "{receiver.url}"\nsample_ratio = 0\n',
                  env=FAST_EXPORT)
    body = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(proxy.base_url + "/chat/completions", json=body).status_code == 200
    unsampled = fake.requests[-1]["headers"]["traceparent"]
    assert int(unsampled.rsplit("-", 1)[1], 16) & 1 == 0  # the upstream still learns the trace, not sampled
    sampled = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
    assert httpx.post(proxy.base_url + "/chat/completions", json=body,
                      headers={"traceparent": sampled}).status_code == 200
    spans = receiver.wait_for(lambda got: len(got) >= 2)
    rows = proxy.rows(expect=2)
    assert len(spans) == 2 and {s.trace_id for s in spans} == {CLIENT_TRACE}
    assert {s.attributes["llmmeter.record_id"] for s in spans} == {rows[1]["id"]}  # rows in time order
