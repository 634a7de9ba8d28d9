"""The HTML report of a seeded month, as Chromium builds it: real tables, charts with axes, readable numbers."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from proxy.report import Report, render
from proxy.report.formats.links import GENAI_PRICES, SHIPPED_PROFILES
from tests.report import browser
from tests.report.dom import Page

TABLES = {"by_model", "totals", "by_tenant", "by_tag", "by_workload", "by_tag_workload", "daily", "what_if",
          "self_hosting", "assumptions", "by_band", "speed", "unpriced_estimated", "load_by_minute", "nodes",
          "node_sources", "cost_curve", "decision", "alternatives", "slo"}
CHARTS = ["daily-cost", "token-mix", "cache-by-day", "tag-workload", "hourly", "breakeven", "cost-curve"]


def test_seeded_month_in_chromium(build: Callable[[str], Report], tmp_path: Path) -> None:
    browser.chromium()
    page = tmp_path / "report.html"
    page.write_text(render(build("complete-utc"), "html"), encoding="utf-8")
    dom = Page(browser.dump_dom(page))

    assert {t.section for t in dom.tables} == TABLES
    sections = {t.section: t for t in dom.tables}
    # The seeded streams have a time to first token: a speed row per model and tier, the busiest first
    # (the unpriced model has no tier).
    assert [[text for _, text in row[:2]] for row in sections["speed"].rows] == [
        ["kimi-k3.1-pro", "standard"], ["kimi-k3.1-pro", "highspeed"], ["some-unpriced-model", "-"]]
    for table in dom.tables:
        assert table.headers and all(len(row) == len(table.headers) for row in table.rows), table.section
    assert [row[2][1] for row in sections["by_band"].rows] == ["base", "base"]  # the shipped Kimi entries have no band
    by_model = {t.section: t for t in dom.tables}["by_model"]
    assert by_model.total[0] == "Total" and by_model.total[-2] == "≥ $72.66, 25 unpriced"  # the seeded month
    assert all(cls == "n" for row in by_model.rows for cls, _ in row[3:])  # numbers aligned right

    assert [c.name for c in dom.charts] == CHARTS
    for chart in dom.charts:
        assert len(chart.texts["y-tick"]) >= 3 and chart.texts["y-title"] and chart.texts["x-title"], chart.name
        assert chart.texts["x-tick"] and chart.marks >= 2, chart.name
    even = {c.name: c for c in dom.charts}["breakeven"]
    assert even.texts["x-title"] == ["tokens per month"] and even.texts["y-title"] == ["cost (USD per month)"]
    assert even.texts["x-tick"] == ["0", "10 B", "20 B", "30 B", "40 B"]
    assert len(even.texts["line-label"]) == 2 and any(t.startswith("break-even: 30.5 B") for t in
                                                       even.texts["mark-label"])

    curve = {c.name: c for c in dom.charts}["cost-curve"]
    assert curve.texts["x-title"] == ["utilisation of the deployment (%)"]
    assert curve.texts["y-title"] == ["cost (USD per million tokens)"]
    assert curve.texts["x-tick"] == ["0%", "20%", "40%", "60%", "80%", "100%"]
    assert any(t.startswith("you: ") for t in curve.texts["mark-label"])  # the measured utilisation, marked
    assert [row[0][1] for row in sections["cost_curve"].rows][::19] == ["5%", "100%"]

    text = dom.text
    assert not re.search(r"\d[eE][+-]?\d", text), re.findall(r".{30}\d[eE][+-]?\d.{10}", text)
    assert "39.6 M" in text and "$55,961.33" in text
    # The load by the minute and the nodes it needs on each shipped profile, every figure sourced.
    load = sections["load_by_minute"]
    assert [row[0][1] for row in load.rows] == ["requests in flight", "prefill (input side)", "decode (output)",
                                                "KV cache in flight"]
    assert [row[0][1] for row in sections["nodes"].rows] == ["8xB300-vllm-fp8", "8xB300-vllm-dcp8",
                                                             "8xMI355X-vllm-atom"]
    assert "vendor claim: vLLM recipe with decode context parallel 8" in text

    # Every figure's origin, as Chromium built the page: links inside reach an id of the page, links out
    # are the shipped profiles' docs section or a provider's prices in genai-prices.
    inside = {x[1:] for x in dom.links if x.startswith("#")}
    assert {"by_model", "load_by_minute", "cost_curve", "assumptions"} <= inside and inside <= dom.ids
    assert all(x == SHIPPED_PROFILES or re.fullmatch(GENAI_PRICES.format(provider=r"[a-z_]+"), x)
               for x in dom.links if not x.startswith("#")), dom.links

    shot = browser.screenshot(page, tmp_path / "report.png")
    print(f"screenshot: {shot}")
