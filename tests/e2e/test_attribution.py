"""Tags and workload classes through the real proxy: ledger, export and metrics."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from decimal import Decimal
from typing import Any

import pytest
from openai import OpenAI

from proxy.ledger.store.histograms import ERROR
from tests.e2e.test_metering import expected_cost
from tests.e2e.test_report import report
from tests.fake_upstream import FakeUpstream

# (input-side tokens, the class SPEC's default bounds give it): each bound at its edge.
EDGES = [(4095, "short"), (4096, "medium"), (32767, "medium"), (32768, "long"),
         (131071, "long"), (131072, "very_long")]


def test_workload_edges_and_tags(fake: FakeUpstream, serve: Any, ledger_db: str | None) -> None:
    proxy = serve(upstream=fake.base_url, config='[[tag]]\nname = "rag-search"\n', db=ledger_db)
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
    export = proxy.cli("export", "--from", "2020-01-01", "--to", "2100-01-01", "--db", proxy.db_url)
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


# Two tenants' traffic: (tenant, tag, input-side tokens, cached of those, output tokens).
TRAFFIC = [("search-team", "rag-search", 150_000, 100_000, 800), ("search-team", "rag-search", 40_000, 0, 500),
           ("search-team", None, 2_000, 1_000, 100), ("agents", "code-agent", 3_000, 2_500, 300),
           ("agents", "code-agent", 3_500, 3_000, 200), ("agents", "code-agent", 5_000, 0, 250),
           ("agents", None, 1_000, 0, 50)]
KEYS = {"search-team": "sk-search-0123456789", "agents": "sk-agents-0123456789"}


def _expected(rows: list[tuple[str, str | None, int, int, int]], key: Any) -> dict[Any, dict[str, Any]]:
    """The per-group sums the report must show, computed here from what was sent."""
    out: dict[Any, dict[str, Any]] = {}
    for tenant, tag, side, cached, completion in rows:
        g = out.setdefault(key(tenant, tag or "untagged", workload_of(side)),
                           {"requests": 0, "input_tokens": 0, "cache_read_tokens": 0, "output_tokens": 0,
                            "cost": Decimal(0)})
        g["requests"] += 1
        g["input_tokens"] += side - cached
        g["cache_read_tokens"] += cached
        g["output_tokens"] += completion
        g["cost"] += expected_cost("kimi-k3.1-pro", "standard", side - cached, completion, cached, 0)
    return out


def workload_of(side: int) -> str:
    for bound, workload in ((4096, "short"), (32768, "medium"), (131072, "long")):
        if side < bound:
            return workload
    return "very_long"


def test_report_by_tag_workload_and_tenant_in_every_format(fake: FakeUpstream, serve: Any,
                                                           ledger_db: str | None) -> None:
    tenants = "".join(f'[[tenant]]\nname = "{t}"\nkey_sha256 = ["{hashlib.sha256(k.encode()).hexdigest()}"]\n'
                      for t, k in KEYS.items())
    proxy = serve(upstream=fake.base_url, config='[[tag]]\nname = "rag-search"\n' + tenants, db=ledger_db)
    for tenant, tag, side, cached, completion in TRAFFIC:
        client = OpenAI(base_url=proxy.base_url, api_key=KEYS[tenant], max_retries=0,
                        default_headers={"x-llmmeter-tag": tag} if tag else None)
        client.chat.completions.create(model="kimi-k3.1-pro", messages=[{"role": "user", "content": "x"}],
                                       extra_headers={"x-fake-usage": json.dumps(
                                           {"prompt": side, "cached": cached, "completion": completion})})
    proxy.rows(expect=len(TRAFFIC))
    total = sum(expected_cost("kimi-k3.1-pro", "standard", s - c, o, c, 0) for _, _, s, c, o in TRAFFIC)

    r = json.loads(report(proxy, "--format", "json"))
    by_tag = _expected(TRAFFIC, lambda tenant, tag, w: tag)
    assert [x["tag"] for x in r["by_tag"]] == sorted(by_tag, key=lambda t: -by_tag[t]["cost"])
    for row in r["by_tag"]:
        want = by_tag[row["tag"]]
        assert {k: row[k] for k in ("requests", "input_tokens", "cache_read_tokens", "output_tokens")} == {
            k: want[k] for k in ("requests", "input_tokens", "cache_read_tokens", "output_tokens")}
        assert Decimal(row["cost_usd"]) == want["cost"]
        assert row["cost_share"] == pytest.approx(float(want["cost"] / total))
        assert row["cache_hit_rate"] == pytest.approx(
            want["cache_read_tokens"] / (want["input_tokens"] + want["cache_read_tokens"]))
    by_workload = _expected(TRAFFIC, lambda tenant, tag, w: w)
    for row in r["by_workload"]:
        want = by_workload.get(row["workload"], {"requests": 0, "cost": Decimal(0)})
        assert (row["requests"], Decimal(row["cost_usd"])) == (want["requests"], want["cost"])
    cells = _expected(TRAFFIC, lambda tenant, tag, w: (tag, w))
    assert {(x["tag"], x["workload"]): Decimal(x["cost_usd"]) for x in r["by_tag_workload"]} == {
        k: v["cost"] for k, v in cells.items()}
    calls, cost = by_workload["very_long"]["requests"], by_workload["very_long"]["cost"]
    assert f"very-long-document requests are {calls / len(TRAFFIC):.0%} of calls and {cost / total:.0%} of cost" \
        in r["workload_summary"]
    # Nearest-rank percentiles of each tenant's input-side tokens, from the sizes sent.
    for row in r["by_tenant"]:
        sizes = sorted(s for t, _, s, _, _ in TRAFFIC if t == row["tenant"])
        p50, p95 = (sizes[(len(sizes) * p + 99) // 100 - 1] for p in (50, 95))
        # From the size histogram: each its bucket's figure, within the stated error of the exact one.
        for figure, exact in ((row["input_tokens_p50"], p50), (row["input_tokens_p95"], p95)):
            assert abs(figure - exact) <= ERROR * exact, (row["tenant"], figure, exact)

    md = report(proxy)
    for tag, want in by_tag.items():
        assert any(line.startswith(f"| {tag} | {want['requests']} |") for line in md.splitlines()), md
    assert r["workload_summary"] in md and "## By tag and workload" in md
    rows = list(csv.DictReader(io.StringIO(report(proxy, "--format", "csv"))))
    csv_cells = {(x["tag"], x["workload"]): Decimal(x["cost_usd"]) for x in rows if x["section"] == "by_tag_workload"}
    assert csv_cells == {k: v["cost"] for k, v in cells.items()}
    assert {x["tag"]: int(x["requests"]) for x in rows if x["section"] == "by_tag"} == {
        t: v["requests"] for t, v in by_tag.items()}
    html = report(proxy, "--format", "html")
    assert "Where the money goes" in html and all(f"{t} " in html or f">{t}<" in html for t in by_tag)
