"""SPEC "Monthly report", added in version 3, from a real ledger (tests/report/billed.py): 1-hour
cache writes, fees, the provider's own cost, bands, batch and flex what-ifs, the speed table,
and each in md, csv and html. Every dollar figure is worked out by hand in the comments."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

from proxy.ledger.store.histograms import ERROR
from proxy.report import Report, render
from tests.report.billed import billed_report
from tests.report.dom import Page


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    return billed_report(tmp_path_factory.mktemp("billed"))


@pytest.fixture(scope="module")
def d(report: Report) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(render(report, "json"))
    return out


def test_totals_carry_one_hour_writes_fees_and_the_providers_cost(d: dict[str, Any]) -> None:
    t = d["totals"]
    assert (t["cache_write_tokens"], t["cache_write_1h_tokens"], t["web_search_calls"]) == (2000, 4000, 3)
    # sonnet-small: $0.003 input + $0.0027 reads + $0.0075 5m writes + $0.024 1h writes (4,000 x $6/M)
    #   + $0.0075 output + $0.03 fees (3 calls x $10/1k) = $0.0747
    # sonnet-long, above the 200k band: 250,000 x $6/M + 1,000 x $22.50/M = $1.5225
    # kimi: 6,000 x $2/M + 4,000 x $0.5/M + 300 x $8/M = $0.0164; 2,000 x $2/M + 800 x $8/M = $0.0104
    assert (t["cost_usd"], t["fees_usd"], t["provider_cost_usd"]) == ("1.624", "0.03", "0.0135")
    # Cache reads over the whole input side, 1h writes included: 13,000 / (259,000 + 13,000 + 2,000 + 4,000).
    assert d["cache_hit_rate"] == 13_000 / 278_000


def test_provider_cost_is_null_where_no_request_reported_one(d: dict[str, Any]) -> None:
    by_model = {x["model"]: x for x in d["by_model"]}
    assert by_model["claude-sonnet-4.5"]["provider_cost_usd"] is None
    assert by_model["kimi-k3.1-pro"]["provider_cost_usd"] == "0.0135"
    assert by_model["claude-sonnet-4.5"]["fees_usd"] == "0.03" and by_model["kimi-k3.1-pro"]["fees_usd"] == "0"
    days = {x["date"]: x for x in d["daily"]}
    assert days["2026-11-10"]["provider_cost_usd"] == "0.0135" and days["2026-11-11"]["provider_cost_usd"] is None


def test_by_band(d: dict[str, Any]) -> None:
    assert [(x["model"], x["above_input_tokens"], x["requests"], x["cost_usd"]) for x in d["by_band"]] == [
        ("claude-sonnet-4.5", 0, 1, "0.0747"), ("claude-sonnet-4.5", 200_000, 1, "1.5225"),
        ("kimi-k3.1-pro", 0, 2, "0.0268")]


def test_what_ifs_at_batch_and_flex_and_without_cache(d: dict[str, Any]) -> None:
    w = d["what_if"]
    # Batch: Sonnet has it. sonnet-small at batch's base: $0.0015 + $0.00135 + $0.00375 + $0.012 (1h at $3/M)
    # + $0.00375 + $0.03 fees = $0.05235; sonnet-long at batch's band (input $3, output $11.25; the band
    # omits the cache prices): $0.75 + $0.01125 = $0.76125. Kimi has no batch tier: as billed, $0.0268.
    assert w["all_batch_usd"] == "0.8404"
    # Flex: Kimi has it: $0.006 + $0.001 + $0.0012 = $0.0082 and $0.002 + $0.0032 = $0.0052. Sonnet as
    # billed, $1.5972.
    assert w["all_flex_usd"] == "1.6106"
    # Without cache: sonnet-small's 16,000 input-side tokens at $3/M = $0.048, + $0.0075 output + $0.03
    # fees = $0.0855; sonnet-long $1.5225; kimi 10,000 x $2/M + $0.0024 = $0.0224, and $0.0104.
    assert w["without_cache_usd"] == "1.6408"
    # Every model at its standard tier: the band and the fees kept, as billed.
    assert w["all_standard_usd"] == "1.624"


def test_speed(d: dict[str, Any]) -> None:
    # Sonnet: 500 tokens in 2.0 s after the first (250/s) and 1,000 in 2.0 s (500/s): the lower
    # middle is the median. Kimi: only its streamed request counts.
    exact = [
        {"model": "claude-sonnet-4.5", "tier": "standard", "requests": 2, "output_tokens_per_s_p50": 250.0,
         "ttft_ms_p50": 400, "ttft_ms_p95": 1000},
        {"model": "kimi-k3.1-pro", "tier": "standard", "requests": 1, "output_tokens_per_s_p50": 500.0,
         "ttft_ms_p50": 200, "ttft_ms_p95": 200}]
    # Each figure is its histogram bucket's, within the stated error of the exact one.
    assert [(x["model"], x["tier"], x["requests"]) for x in d["speed"]] == [
        (x["model"], x["tier"], x["requests"]) for x in exact]
    for got, want in zip(d["speed"], exact, strict=True):
        for k in ("output_tokens_per_s_p50", "ttft_ms_p50", "ttft_ms_p95"):
            assert abs(got[k] - want[k]) <= ERROR * want[k], (k, got, want)


def test_markdown_shows_the_new_columns_sections_and_what_ifs(report: Report) -> None:
    md = render(report, "md")
    assert ("| model | tier | upstream | requests | input (tokens) | cache read (tokens) | cache write (tokens) | "
            "cache write 1h (tokens) | output (tokens) | web search (calls) | cost (USD) | fees in cost (USD) | "
            "provider cost (USD) | share of cost (%) |") in md
    assert "| claude-sonnet-4.5 | standard | above 200,000 tokens | 1 | 250,000 |" in md
    # Two requests are too few for a speed figure (the JSON above keeps them); $1.5972 / 267,500 tokens
    assert "| claude-sonnet-4.5 | standard | 2 | too few (2) | too few (2) | too few (2) | $5.97 |" in md
    assert "| every model at its batch tier, where it has one (else as billed) | $0.84 | -$0.78 |" in md
    assert "The upstreams' own figure: $0.01 over 1 request that reported a cost." in md
    # A row none of whose requests reported a cost shows "-", not $0.00.
    assert "| 2 | 251,000 | 9,000 | 2,000 | 4,000 | 1,500 | 3 | $1.60 | $0.03 | - | 98.3% |" in md


def test_csv_sections_and_exact_money(report: Report) -> None:
    rows = list(csv.DictReader(io.StringIO(render(report, "csv"), newline="")))
    [totals] = [r for r in rows if r["section"] == "totals"]
    assert (totals["fees_usd"], totals["provider_cost_usd"], totals["cache_write_1h_tokens"]) == ("0.03", "0.0135",
                                                                                                  "4000")
    bands = [(r["model"], r["above_input_tokens"]) for r in rows if r["section"] == "by_band"]
    assert bands == [("claude-sonnet-4.5", "0"), ("claude-sonnet-4.5", "200000"), ("kimi-k3.1-pro", "0")]
    assert [r["ttft_ms_p95"] for r in rows if r["section"] == "speed"] == ["1002", "201"]  # their buckets
    assert [r["provider_cost_usd"] for r in rows if r["section"] == "by_model"] == ["", "0.0135"]


def test_html_tables_and_cards(report: Report) -> None:
    page = Page(render(report, "html"))
    sections = {t.section: t for t in page.tables}
    by_model = sections["by_model"]
    for header in ("cache write 1h tokens", "web search calls", "fees in cost USD", "provider cost USD"):
        assert header in by_model.headers, header
    assert [r[by_model.headers.index("provider cost USD")][1] for r in by_model.rows] == ["-", "$0.01"]
    assert [row[2][1] for row in sections["by_band"].rows] == ["base", "above 200,000 tokens", "base"]
    assert [row[3][1] for row in sections["speed"].rows] == ["too few (2)", "too few (1)"]  # JSON keeps them
    assert "Provider-reported cost" in page.text and "3 web search calls, in the cost" in page.text


def test_postgresql_reports_the_same(report: Report, pg_url: str, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a PostgreSQL ledger journals under ./data/journal
    assert render(billed_report(tmp_path, pg_url), "json") == render(report, "json")


def test_html_of_the_ledger_in_chromium(report: Report, tmp_path: Path) -> None:
    from tests.report import browser

    browser.chromium()
    page = tmp_path / "report.html"
    page.write_text(render(report, "html"), encoding="utf-8")
    dom = Page(browser.dump_dom(page))
    sections = {t.section: t for t in dom.tables}
    for table in dom.tables:
        assert table.headers and all(len(row) == len(table.headers) for row in table.rows), table.section
    assert sections["speed"].headers[:4] == ["model", "tier", "streamed requests count", "output speed p50 tokens/s"]
    assert all(cls == "n" for row in sections["by_band"].rows for cls, _ in row[3:])
    assert sections["by_band"].total[0] == "Total" and "$1.62" in sections["by_band"].total
    token_mix = {c.name: c for c in dom.charts}["token-mix"]
    assert "The month: input 259 k" in dom.text and "cache write 1h 4 k" in dom.text, token_mix.name
