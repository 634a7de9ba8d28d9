"""Speeds in the Markdown and HTML reports: a percentile over fewer than ten requests, or a time
below the ledger's millisecond, is said in words, not shown as a figure ("909,000 tokens/s");
JSON and CSV keep the numbers as measured."""

from __future__ import annotations

import json

from proxy.ledger.store.slo import SloRow
from proxy.report import render
from proxy.report.model import SpeedRow
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
