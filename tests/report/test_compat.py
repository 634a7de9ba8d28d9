"""The typed Report writes the JSON and CSV the dict-built report wrote, byte for byte, with
version 3's additions on top: taken away again, what remains is the file as it was. Since then
a row whose every request was unpriced says its cost is unknown (null, not "0") and each row
counts its unpriced requests: those are put back as they were before comparing. And the
per-tenant input-side percentiles come from migration 015's histograms: each is checked to be
within the stated bucket error of the exact figure the file holds, then put back."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from proxy.ledger.store.histograms import ERROR
from proxy.report import Report, render
from tests.report.conftest import VARIANTS

DATA = Path(__file__).parent / "data"
V3_FIELDS = {"cache_write_1h_tokens", "web_search_calls", "fees_usd", "provider_cost_usd"}
V3_TOP = {"by_band", "speed", "budgets", "unpriced_estimated"}
V3_WHAT_IF = {"all_batch_usd", "all_flex_usd"}
V4_TOP = {"load_by_minute", "nodes", "slo", "cost_curve", "decision", "alternatives"}  # SPEC "Self-hosting, version 2"


def as_before_unknown_cost(d: dict[str, Any]) -> dict[str, Any]:
    """The JSON as it was before unknown costs read null: "0" and a 0.0 share, no per-row unpriced count."""
    rows = [*(x for k in ("by_model", "by_tenant", "by_tag", "by_workload", "by_tag_workload", "by_band", "daily")
              for x in d[k])]
    for row in rows:
        unpriced = row.pop("unpriced_requests")
        if row["cost_usd"] is None:
            assert unpriced and row.get("cost_share", None) is None
            row["cost_usd"] = "0"
            if "cost_share" in row:
                row["cost_share"] = 0.0
    if d["totals"]["cost_usd"] is None:
        d["totals"]["cost_usd"] = "0"
    return d


def without_v3(value: Any, top: bool = False) -> Any:
    if isinstance(value, dict):
        drop = V3_FIELDS | (V3_TOP | V4_TOP if top else set()) | V3_WHAT_IF
        return {k: without_v3(v) for k, v in value.items() if k not in drop}
    if isinstance(value, list):
        return [without_v3(v) for v in value]
    return value


PERCENTILES = ("input_tokens_p50", "input_tokens_p95")


def as_exact(new: Any, old: Any) -> Any:
    """`new` with each percentile figure replaced by the exact one in `old`, after checking it is near."""
    f, exact = int(new), int(old)
    assert abs(f - exact) <= ERROR * exact and (exact >= 64 or f == exact), (new, old)
    return old


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_json_is_byte_for_byte_what_it_was(build: Callable[[str], Report], variant: str) -> None:
    d = json.loads(render(build(variant), "json"))
    old = (DATA / f"{variant}.json").read_text()
    for row, was in zip(d["by_tenant"], json.loads(old)["by_tenant"], strict=True):
        for k in PERCENTILES:
            row[k] = as_exact(row[k], was[k])
    assert json.dumps(without_v3(as_before_unknown_cost(json.loads(json.dumps(d))), top=True), indent=2) + "\n" == old
    # Every token object gained the four fields; the seeded ledger has none of them.
    for obj in (d["totals"], *d["by_model"], *d["by_tenant"], *d["by_tag"], *d["by_workload"],
                *d["by_tag_workload"], *d["daily"], *d["by_band"]):
        assert (obj["cache_write_1h_tokens"], obj["web_search_calls"], obj["fees_usd"],
                obj["provider_cost_usd"]) == (0, 0, "0", None)
    assert set(d["what_if"]) >= V3_WHAT_IF and set(d) >= V3_TOP


@pytest.mark.parametrize("variant", ["complete-utc", "running-ny-agents"])
def test_csv_rows_are_what_they_were(build: Callable[[str], Report], variant: str) -> None:
    # No client text here starts a formula, so the spreadsheet rule changes nothing.
    old = list(csv.reader(io.StringIO((DATA / f"{variant}.csv").read_text(), newline="")))
    new = list(csv.reader(io.StringIO(render(build(variant), "csv"), newline="")))
    width = len(old[0])
    header = new[0]
    for row in new[1:]:  # unknown costs read empty, not "0"; every row counts its unpriced requests
        if row[0] != "totals":
            row[header.index("unpriced_requests")] = ""
        if row[header.index("cost_usd")] == "" and row[0] not in ("hourly", "speed", "budgets", "unpriced_estimated"):
            row[header.index("cost_usd")] = "0"
            if row[0] != "daily":
                row[header.index("cost_share")] = "0.0"
    for row, was in zip(new[1:len(old)], old[1:], strict=True):
        if row[0] == "by_tenant":
            for k in PERCENTILES:
                row[header.index(k)] = as_exact(row[header.index(k)], was[old[0].index(k)])
    # Version 3's columns come after the earlier ones, its sections after the earlier rows.
    assert new[0][:width] == old[0]
    assert new[0][width:width + 4] == ["cache_write_1h_tokens", "web_search_calls", "fees_usd", "provider_cost_usd"]
    assert [row[:width] for row in new[1:len(old)]] == old[1:]
    assert {row[0] for row in new[len(old):]} <= {"by_band", "speed", "unpriced_estimated", *V4_TOP}
    assert [row[0] for row in new[len(old):]].count("by_band") == 2  # kimi-k3.1-pro standard and highspeed
