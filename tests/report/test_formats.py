"""Each format rendered in-process from one built Report: md, json, csv, html."""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from proxy.errors import ConfigError
from proxy.report import render
from proxy.report.model import Forecast, ModelRow, Reprice, TagRow, TenantRow, Totals, Usage
from tests.report.dom import Page
from tests.report.factory import BOTH, USD, worked_report

SPEC_KEYS = ["month", "timezone", "tenant", "generated_at", "totals", "cache_hit_rate", "estimated_share",
             "unpriced_models", "by_model", "by_tenant", "by_tag", "by_workload", "by_tag_workload", "by_band",
             "workload_summary", "daily", "hourly_profile", "peak_to_offpeak_ratio", "speed", "unpriced_estimated",
             "budgets", "forecast", "what_if", "self_hosting", "load_by_minute", "nodes", "slo",
             "cost_curve", "decision", "alternatives"]
HOSTILE = '=HYPERLINK("http://evil","x")'


def test_json_keys_and_exact_money() -> None:
    d = json.loads(render(worked_report(), "json"))
    assert list(d) == SPEC_KEYS
    assert d["totals"]["cost_usd"] == "674" and d["what_if"] == {
        "all_standard_usd": "674", "all_highspeed_usd": "1334", "without_cache_usd": "800",
        "all_batch_usd": "674", "all_flex_usd": "674"}
    assert d["by_band"] == [{"model": "kimi-k3.1-pro", "tier": "standard", "above_input_tokens": 0, "requests": 2,
                             "input_tokens": 130_000_000, "cache_read_tokens": 70_000_000, "cache_write_tokens": 0,
                             "output_tokens": 40_000_000, "reasoning_tokens": 0, "cache_write_1h_tokens": 0,
                             "web_search_calls": 0, "cost_usd": "674", "fees_usd": "0", "provider_cost_usd": None,
                             "cost_share": 1.0, "unpriced_requests": 0}]
    assert d["speed"] == [{"model": "kimi-k3.1-pro", "tier": "standard", "requests": 1,
                           "output_tokens_per_s_p50": 52.5, "ttft_ms_p50": 640, "ttft_ms_p95": 640}]
    assert d["generated_at"] == "2026-12-01T08:00:00Z"
    assert d["self_hosting"]["monthly_cost_usd"] == "55961.3333333333"
    assert d["daily"][2]["cost_by_model_tier"] == {"kimi-k3.1-pro/standard": "674"}
    repriced = json.loads(render(worked_report(reprice=Reprice(datetime(2026, 10, 23, tzinfo=UTC), 674 * USD)),
                                 "json"))
    assert list(repriced).index("reprice") == SPEC_KEYS.index("self_hosting")
    assert repriced["reprice"] == {"at": "2026-10-23T00:00:00Z", "cost_usd": "674"}


def test_markdown_tables_align_numbers_and_total_them() -> None:
    md = render(worked_report(), "md")
    assert md.startswith("# llmmeter usage report: 2026-11 (UTC)\n")
    assert "**$674.00** for 2 requests" in md and "## Self-hosting" in md
    assert "| model | tier | upstream | requests | input (tokens) |" in md
    assert "|---|---|---|---:|---:|" in md
    assert "| **Total** |" in md and "**$674.00**" in md
    assert "| every model at its highspeed tier, where it has one | $1,334.00 | +$660.00 |" in md


def test_markdown_cells_cannot_break_the_table() -> None:
    r = worked_report(by_model=(ModelRow("a|b\nc", "standard", "default", BOTH, 1.0),))
    assert "| a\\|b c | standard |" in render(r, "md")


def test_tiny_amounts_never_read_as_zero() -> None:
    tiny = Usage(1, 10, 0, 0, 1, 0, 8 * 10**6)  # $0.0008
    r = worked_report(totals=Totals(tiny, 0, 0), by_model=(ModelRow("m", "standard", "default", tiny, 1.0),))
    assert render(r, "md").count("$0.0008") >= 3  # the headline, the totals, the model's row
    sections = {t.section: t for t in Page(render(r, "html")).tables}
    [row] = sections["by_model"].rows
    assert ("n", "$0.0008") in row and "$0.0008" in sections["by_model"].total
    assert sections["totals"].rows[0][-1] == ("n", "$0.0008")


def test_a_month_in_progress_lists_days_up_to_today() -> None:
    running = worked_report(generated_at=datetime(2026, 11, 17, 3, tzinfo=UTC),
                            forecast=Forecast(False, 900 * USD, 300_000_000, "run-rate"))
    for report in (running, replace(running, timezone="America/New_York")):  # Nov 16, 22:00 there
        days = [row[0][1] for row in {t.section: t for t in Page(render(report, "html")).tables}["daily"].rows]
        assert days[0] == "2026-11-01" and days[-1] == ("2026-11-17" if report.timezone == "UTC" else "2026-11-16")
    assert "| 2026-11-17 |" in render(running, "md") and "| 2026-11-18 |" not in render(running, "md")
    assert len(json.loads(render(running, "json"))["daily"]) == 30  # the JSON contract keeps every day


def test_csv_sections_and_numbers_as_written() -> None:
    rows = list(csv.DictReader(io.StringIO(render(worked_report(), "csv"))))
    assert [r["section"] for r in rows][:2] == ["totals", "by_model"]
    assert {r["section"] for r in rows} == {"totals", "by_model", "by_tenant", "by_tag", "by_workload",
                                            "by_tag_workload", "daily", "hourly", "by_band", "speed",
                                            "load_by_minute"}
    [speed] = [r for r in rows if r["section"] == "speed"]
    assert (speed["model"], speed["output_tokens_per_s_p50"], speed["ttft_ms_p95"]) == ("kimi-k3.1-pro", "52.5", "640")
    assert [r["cost_usd"] for r in rows if r["section"] == "totals"] == ["674"]
    assert len([r for r in rows if r["section"] == "hourly"]) == 24


def test_csv_text_a_client_chose_is_not_a_formula() -> None:
    r = worked_report(by_model=(ModelRow(HOSTILE, "standard", "default", BOTH, 1.0),),
                      by_tenant=(TenantRow("@x", BOTH, 1.0, 1, 2),),
                      by_tag=(TagRow("-x", BOTH, 1.0), TagRow("+x", BOTH, 1.0), TagRow("\tx", BOTH, 1.0),
                              TagRow("\rx", BOTH, 1.0), TagRow("plain", BOTH, 1.0)))
    rows = list(csv.DictReader(io.StringIO(render(r, "csv"), newline="")))
    assert [x["model"] for x in rows if x["section"] == "by_model"] == ["'" + HOSTILE]
    assert [x["tenant"] for x in rows if x["section"] == "by_tenant"] == ["'@x"]
    assert [x["tag"] for x in rows if x["section"] == "by_tag"] == ["'-x", "'+x", "'\tx", "'\rx", "plain"]
    assert all(not x["cost_usd"].startswith("'") for x in rows)


def _page(r: object = None) -> Page:
    return Page(render(worked_report() if r is None else r, "html"))  # type: ignore[arg-type]


def test_html_tables_are_tables_with_units_alignment_and_totals() -> None:
    page = _page()
    sections = {t.section: t for t in page.tables}
    assert {"by_model", "by_tenant", "by_tag", "by_workload", "by_tag_workload", "daily", "totals", "what_if",
            "self_hosting", "assumptions", "by_band", "speed"} <= set(sections)
    # A month with no 1-hour writes, fees or provider cost shows none of their columns.
    assert not {"cache write 1h tokens", "web search calls", "fees in cost USD", "provider cost USD"} & set(
        sections["by_model"].headers)
    by_model = sections["by_model"]
    assert by_model.headers[:5] == ["model", "tier", "upstream", "requests count", "input tokens"]
    assert "cost USD" in by_model.headers and "share of cost %" in by_model.headers
    [row] = by_model.rows
    assert [c for c, _ in row[:3]] == ["", "", ""] and all(c == "n" for c, _ in row[3:])
    assert by_model.total[0] == "Total" and "$674.00" in by_model.total
    assert sections["daily"].total[-1] == "$674.00" and len(sections["daily"].rows) == 30
    assert "<pre>" not in render(worked_report(), "html")


def test_html_charts_have_axes_units_legends_and_hover_values() -> None:
    page = _page()
    assert [c.name for c in page.charts] == ["daily-cost", "token-mix", "cache-by-day", "tag-workload", "hourly",
                                            "breakeven"]
    for chart in page.charts:
        assert len(chart.texts.get("y-tick", [])) >= 2, chart.name
        assert chart.texts.get("x-tick"), chart.name
        assert chart.texts.get("y-title") and chart.texts.get("x-title"), chart.name
        assert chart.marks, chart.name
    charts = {c.name: c for c in page.charts}
    assert charts["daily-cost"].texts["y-title"] == ["cost (USD per day)"]
    assert charts["daily-cost"].texts["y-tick"][-1] == "$800"
    assert any("$674.00" in t for t in charts["daily-cost"].titles)
    even = charts["breakeven"]
    assert even.texts["x-title"] == ["tokens per month"] and even.texts["y-title"] == ["cost (USD per month)"]
    assert "API cost at this month's price per token" in even.texts["line-label"]
    assert "self-hosting: $55,961/month" in even.texts["line-label"]
    assert any(t.startswith("break-even: 19.9 B tokens/month") for t in even.texts["mark-label"])
    assert even.texts["x-tick"][:3] == ["0", "5 B", "10 B"]


def test_html_has_no_scientific_notation_and_fetches_nothing() -> None:
    huge = Usage(1, 10**15, 0, 0, 10**15, 0, 10**30)
    r = worked_report(totals=Totals(huge, 0, 0), by_model=(ModelRow("m", "standard", "default", huge, 1.0),))
    for report in (worked_report(), r):
        text = render(report, "html")
        page = Page(text)
        assert not re.search(r"\d[eE][+-]?\d", page.text), re.findall(r".{20}\d[eE][+-]?\d.{20}", page.text)
        assert not [w for w in ("src=", "href=", "<link", "url(", "@import", "<script") if w in text]


def test_html_escapes_what_a_client_chose() -> None:
    r = worked_report(by_model=(ModelRow("<script>alert(1)</script>", "standard", "default", BOTH, 1.0),),
                      unpriced_models=("<img src=x>",))
    text = render(r, "html")
    assert "<script>alert" not in text and "<img" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_html_of_an_empty_month() -> None:
    empty = worked_report(totals=Totals(Usage(), 0, 0), by_model=(), by_tenant=(), by_tag=(), by_tag_workload=(),
                          daily=tuple(replace(d, usage=Usage(), cost_by_model_tier=()) for d in worked_report().daily),
                          self_hosting=replace(worked_report().self_hosting, api_tokens=0, api_cost_units=0,
                                               breakeven_monthly_tokens=0))
    page = Page(render(empty, "html"))
    assert "No requests this month." in page.text
    assert len(page.charts) == 6 and all(c.texts.get("y-tick") for c in page.charts)


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ConfigError, match="not available"):
        render(worked_report(), "xlsx")
