"""Speeds in the Markdown and HTML reports: a percentile over fewer than ten requests, or a time
below the ledger's millisecond, is said in words, not shown as a figure ("909,000 tokens/s");
JSON and CSV keep the numbers as measured."""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from pricing import PriceBook
from proxy.ledger.record import Record
from proxy.ledger.store import open_store
from proxy.ledger.store.histograms import ERROR
from proxy.ledger.store.slo import SloRow
from proxy.report import ReportInput, build_report, render
from proxy.report.model import SpeedRow
from proxy.settings import SelfHost
from tests.report.factory import worked_report

FEW = SloRow("kimi-k3.1-pro", "standard", "lt_32k", 3, 0, 2, 2, 909_000.0, 909_000.0)
MANY = SloRow("kimi-k3.1-pro", "standard", "32k_128k", 40, 0, 640, 12, 52.5, 88.25)


def test_few_requests_and_sub_millisecond_times_are_words() -> None:
    r = worked_report(speed=(SpeedRow("kimi-k3.1-pro", "standard", 1, 909_000.0, 0, 0),), slo=(FEW, MANY))
    for text, below in ((render(r, "md"), "< 1"), (render(r, "html"), "&lt; 1")):
        assert "909,000" not in text and "too few (1)" in text and "too few (2)" in text and "too few (3)" in text
        assert "52.50" in text and "88.25" in text and below in text and "640" in text
    d = json.loads(render(r, "json"))
    assert d["speed"][0]["output_tokens_per_s_p50"] == 909_000.0 and d["slo"][0]["output_tokens_per_s_p50"] == 909_000.0


def test_a_ledger_s_sub_millisecond_timings_are_not_figures(tmp_path: Path) -> None:
    """Twelve streamed requests with a first token in under a millisecond: ten end with it (no time to
    decode in), two a millisecond later with 909 tokens each. The median speed over those two is
    909,000 tokens/s: not shown as a figure in the speed or SLO table, in Markdown or HTML."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    store = open_store(url)
    store.migrate()
    at = datetime(2026, 11, 3, 12, tzinfo=UTC)
    writer = store.writer()
    try:
        writer.insert_many([Record(id=f"fast-{i:02d}", start=at + timedelta(seconds=i), tenant="app", endpoint="chat",
                                   stream=True, code=200, outcome="ok", upstream="moonshot", model="kimi-k3.1-pro",
                                   tier="standard", input_tokens=100, output_tokens=909, ttft_ms=0,
                                   duration_ms=1 if i < 2 else 0, cost_units=1000) for i in range(12)])
    finally:
        writer.close()
    inp = ReportInput(month="2026-11", tz=ZoneInfo("UTC"), book=PriceBook([]), selfhost=SelfHost(),
                      workload_bounds=(4096, 32768, 131072), now=datetime(2026, 12, 15, tzinfo=UTC))
    r = build_report(open_store(url, read_only=True), inp)
    # The speed histogram's bucket figure, within its stated error of 909,000 (store/histograms.py).
    [row] = r.speed
    [slo] = r.slo
    assert (row.requests, slo.requests, slo.timed_requests) == (12, 12, 2)
    for figure in (row.output_tokens_per_s_p50, slo.output_tokens_per_s_p50):
        assert figure is not None and abs(figure - 909_000) <= ERROR * 909_000
    for text in (render(r, "md"), render(r, "html")):
        assert f"{row.output_tokens_per_s_p50:,.0f}" not in text and "too few (2)" in text
    md = render(r, "md")
    speed = next(line for line in md.splitlines() if line.startswith("| kimi-k3.1-pro | standard | 12 |"))
    assert [html.unescape(c) for c in speed.split(" | ")[3:6]] == ["too few (2)", "< 1", "< 1"]  # < as &lt;
