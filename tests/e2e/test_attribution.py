"""Tags and workload classes through the real proxy: ledger, export and metrics."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from openai import OpenAI

from tests.e2e.test_metering import expected_cost
from tests.fake_upstream import FakeUpstream

# (input-side tokens, the class SPEC's default bounds give it): each bound at its edge.
EDGES = [(4095, "short"), (4096, "medium"), (32767, "medium"), (32768, "long"),
         (131071, "long"), (131072, "very_long")]


def test_workload_edges_and_tags(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url, config='[[tag]]\nname = "rag-search"\n')
    client = OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    tags = ["rag-search", None, "Unknown tag;x", "rag-search", None, "rag-search"]
    for (tokens, _), tag in zip(EDGES, tags, strict=True):
        headers = {"x-fake-usage": json.dumps({"prompt": tokens, "cached": tokens // 2, "completion": 10})}
        if tag:
            headers["x-llmmeter-tag"] = tag
        client.chat.completions.create(model="kimi-k3.1-pro", messages=[{"role": "user", "content": "x"}],
                                       extra_headers=headers)
    assert not [h for r in fake.requests for h in r["headers"] if h.startswith("x-llmmeter")]

    rows = proxy.rows(expect=len(EDGES))
    assert [(r["input_tokens"] + r["cache_read_tokens"], r["workload"]) for r in rows] == EDGES
    assert [r["tag"] for r in rows] == ["rag-search", None, "Unknown_tag_x", "rag-search", None,
                                        "rag-search"]
    export = proxy.cli("export", "--from", "2020-01-01", "--to", "2100-01-01", "--db", f"sqlite:///{proxy.db}")
    lines = list(csv.DictReader(io.StringIO(export.stdout)))
    assert [(x["tag"], x["workload"]) for x in lines] == [(r["tag"] or "", r["workload"]) for r in rows]

    def cost(i: int) -> float:
        tokens = EDGES[i][0]
        return float(expected_cost("kimi-k3.1-pro", "standard", tokens - tokens // 2, 10, tokens // 2, 0))

    assert proxy.metric("llmmeter_tagged_cost_usd_total", tag="rag-search", workload="short") == pytest.approx(
        cost(0), rel=1e-12)
    assert proxy.metric("llmmeter_tagged_cost_usd_total", tag="rag-search", workload="long") == pytest.approx(
        cost(3), rel=1e-12)
    assert proxy.metric("llmmeter_tagged_cost_usd_total", tag="other", workload="medium") == pytest.approx(
        cost(1) + cost(2), rel=1e-12)  # untagged and undeclared tags share `other`
    assert proxy.metric("llmmeter_request_input_tokens_bucket", model="kimi-k3.1-pro", le="4096.0") == 2
    assert proxy.metric("llmmeter_request_input_tokens_bucket", model="kimi-k3.1-pro", le="1.048576e+06") == 6
