"""`llmmeter report` over traffic that went through the real proxy; numbers checked independently."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from openai import OpenAI

from proxy.ledger.store.histograms import ERROR
from tests.fake_upstream import FakeUpstream
from tests.report import browser
from tests.report.dom import Page

# The launch coverage's worked example, as two requests (each with 20M output tokens).
WORKED = [({"prompt": 100_000_000, "completion": 20_000_000}, "rag-search"),
          ({"prompt": 100_000_000, "cached": 70_000_000, "completion": 20_000_000}, None)]


def report(proxy: Any, *args: str) -> Any:
    month = datetime.now(UTC).strftime("%Y-%m")
    r = proxy.cli("report", "--month", month, "--db", proxy.db_url, *args)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_worked_example_and_what_ifs_exactly(fake: FakeUpstream, serve: Any, ledger_db: str | None) -> None:
    proxy = serve(upstream=fake.base_url, config='[[tag]]\nname = "rag-search"\n', db=ledger_db)
    client = OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    for usage, tag in WORKED:
        headers = {"x-fake-usage": json.dumps(usage), **({"x-llmmeter-tag": tag} if tag else {})}
        client.chat.completions.create(model="kimi-k3.1-pro", messages=[{"role": "user", "content": "x"}],
                                       extra_headers=headers)
    proxy.rows(expect=2)
    r = json.loads(report(proxy, "--format", "json"))
    assert r["totals"]["cost_usd"] == "674"  # 400 + 274
    # Kimi has no batch or flex tier: those what-ifs are the month as billed.
    assert r["what_if"] == {"all_standard_usd": "674", "all_highspeed_usd": "1334", "without_cache_usd": "800",
                            "all_batch_usd": "674", "all_flex_usd": "674"}
    assert r["totals"]["input_tokens"] == 130_000_000 and r["totals"]["cache_read_tokens"] == 70_000_000
    assert r["cache_hit_rate"] == 70_000_000 / 200_000_000
    [m] = r["by_model"]
    assert (m["model"], m["tier"], m["upstream"], m["requests"], m["cost_usd"]) == (
        "kimi-k3.1-pro", "standard", "default", 2, "674")
    tags = {t["tag"]: t for t in r["by_tag"]}
    assert tags["rag-search"]["cost_usd"] == "400" and tags["untagged"]["cost_usd"] == "274"
    assert tags["untagged"]["cache_hit_rate"] == 0.7
    [long_docs] = [w for w in r["by_workload"] if w["workload"] == "very_long"]
    assert long_docs["requests"] == 2 and long_docs["min_input_tokens"] == 131072
    assert r["workload_summary"] == "very-long-document requests are 100% of calls and 100% of cost."
    assert {(x["tag"], x["workload"], x["cost_usd"]) for x in r["by_tag_workload"]} == {
        ("rag-search", "very_long", "400"), ("untagged", "very_long", "274")}
    [tenant] = r["by_tenant"]
    # Both requests sent 100,000,000 input-side tokens: the size histogram's bucket figure, within its stated error.
    assert tenant["tenant"] == "default"
    for figure in (tenant["input_tokens_p50"], tenant["input_tokens_p95"]):
        assert abs(figure - 100_000_000) <= ERROR * 100_000_000
    assert sum(d["requests"] for d in r["daily"]) == 2 and len(r["daily"]) >= 28
    assert sum(h["tokens"] for h in r["hourly_profile"]) == 240_000_000
    assert r["forecast"]["month_complete"] is False
    sh = r["self_hosting"]
    assert sh["api_cost_usd"] == "674" and sh["api_tokens"] == 240_000_000
    monthly = (Decimal(2 * 600_000) / 36 + 2 * 15 * 730 * Decimal("0.12") + 20_000).quantize(Decimal("1e-10"))
    assert Decimal(sh["monthly_cost_usd"]) == monthly  # SPEC's formula with the defaults, to 10^-10 USD
    tokens = 240_000_000
    assert sh["breakeven_monthly_tokens"] == int(monthly * tokens / 674)
    assert sh["volume_multiple_to_breakeven"] == sh["breakeven_monthly_tokens"] / tokens
    assert "breaks even at" in sh["summary"]

    repriced = json.loads(report(proxy, "--format", "json", "--reprice-at", "2026-10-23T00:00:00Z"))
    assert repriced["reprice"]["cost_usd"] == "674"
    before = json.loads(report(proxy, "--format", "json", "--reprice-at", "2026-10-01"))
    assert before["reprice"]["cost_usd"] == "0"  # no table was in force yet

    md = report(proxy)
    assert "$674.00" in md and "## Self-hosting" in md
    rows = list(csv.DictReader(io.StringIO(report(proxy, "--format", "csv"))))
    # No request was streamed: the speed section has no rows.
    assert {x["section"] for x in rows} == {"totals", "by_model", "by_tenant", "by_tag", "by_workload",
                                            "by_tag_workload", "daily", "hourly", "by_band", "load_by_minute",
                                            "nodes", "cost_curve", "decision", "alternatives"}
    assert [x["cost_usd"] for x in rows if x["section"] == "totals"] == ["674"]


def test_empty_month_and_bad_month(serve: Any, fake: FakeUpstream, ledger_db: str | None) -> None:
    proxy = serve(upstream=fake.base_url, db=ledger_db)
    r = proxy.cli("report", "--month", "2026-02", "--tz", "America/Sao_Paulo", "--format", "json",
                  "--db", proxy.db_url)
    assert r.returncode == 0, r.stderr
    empty = json.loads(r.stdout)
    assert empty["totals"]["cost_usd"] == "0" and len(empty["daily"]) == 28 and empty["forecast"]["month_complete"]
    assert empty["self_hosting"]["summary"].startswith("No API traffic")
    bad = proxy.cli("report", "--month", "2026-13", "--db", proxy.db_url)
    assert bad.returncode == 2 and "use YYYY-MM" in bad.stderr


def test_html_report_is_a_page_chromium_can_read(fake: FakeUpstream, serve: Any, tmp_path: Path) -> None:
    browser.chromium()
    proxy = serve(upstream=fake.base_url)
    client = OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    for usage, _ in WORKED:
        client.chat.completions.create(model="kimi-k3.1-pro", messages=[{"role": "user", "content": "x"}],
                                       extra_headers={"x-fake-usage": json.dumps(usage)})
    proxy.rows(expect=2)
    page = tmp_path / "report.html"
    report(proxy, "--format", "html", "--out", str(page))
    text = page.read_text()
    # Self-contained: nothing to fetch (the SVG namespace is a name, not a fetch). The figures' links
    # to their origins (<a href>) are followed only when clicked.
    fetched = re.sub(r'<a href="[^"<>]*">', "<a>", text)
    assert not [w for w in ("src=", "href=", "<link", "url(", "@import", "<script") if w in fetched]
    assert 'href="#by_model"' in text
    dom = Page(browser.dump_dom(page))
    tables = {t.section: t for t in dom.tables}
    assert tables["by_model"].total[-2:] == ["$674.00", "100.0%"]
    assert [c.name for c in dom.charts] == ["daily-cost", "token-mix", "cache-by-day", "tag-workload", "hourly",
                                            "breakeven", "cost-curve"]
    assert all(c.texts.get("y-tick") and c.texts.get("x-title") and c.texts.get("y-title") for c in dom.charts)
    even = {c.name: c for c in dom.charts}["breakeven"]
    assert any(t.startswith("this month: 240 M tokens, $674.00") for t in even.texts["mark-label"])
    assert not re.search(r"\d[eE][+-]?\d", dom.text)
    browser.screenshot(page, tmp_path / "report.png")


HOSTILE_MODEL = '=HYPERLINK("http://evil","x")'
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def test_every_csv_llmmeter_writes_opens_as_text_in_a_spreadsheet(fake: FakeUpstream, serve: Any,
                                                                    tmp_path: Path) -> None:
    proxy = serve(upstream=fake.base_url)
    client = OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    sent = [(HOSTILE_MODEL, "=1+1", "+x", "@x"), ("+model", "@user", "-x", "-team"),
            ("kimi-k3.1-pro", "-1", "rag search!", "t" * 100)]
    for model, user, tag, tenant in sent:
        client.chat.completions.create(model=model, user=user, messages=[{"role": "user", "content": "x"}],
                                       extra_headers={"x-llmmeter-tag": tag, "x-llmmeter-tenant": tenant})
    rows = proxy.rows(expect=3)
    # The tenant header is cleaned exactly as the tag header: the same characters, at most 64 of them.
    assert [(r["tag"], r["tenant"]) for r in rows] == [("_x", "_x"), ("-x", "-team"), ("rag_search_", "t" * 64)]

    today = datetime.now(UTC).date()
    window = ("--from", today.isoformat(), "--to", (today + timedelta(days=1)).isoformat(), "--db", proxy.db_url)
    exported = proxy.cli("export", *window)
    assert exported.returncode == 0, exported.stderr
    out = tmp_path / "export.csv"
    assert proxy.cli("export", *window, "--out", str(out)).returncode == 0
    assert out.read_text() == exported.stdout
    report_out = tmp_path / "report.csv"
    report(proxy, "--format", "csv", "--out", str(report_out))
    for name, text in (("export", exported.stdout), ("report", report(proxy, "--format", "csv")),
                       ("report --out", report_out.read_text())):
        cells = [c for row in csv.reader(io.StringIO(text, newline="")) for c in row]
        assert not [c for c in cells if c.startswith(FORMULA_START)], name
    export = list(csv.DictReader(io.StringIO(exported.stdout, newline="")))
    assert [(r["model_requested"], r["end_user"], r["tag"], r["tenant"]) for r in export] == [
        ("'" + HOSTILE_MODEL, "'=1+1", "_x", "_x"), ("'+model", "'@user", "'-x", "'-team"),
        ("kimi-k3.1-pro", "'-1", "rag_search_", "t" * 64)]
    assert all(r["cost_usd"] == "" or r["cost_usd"][0].isdigit() for r in export)
    by_model = [r["model"] for r in csv.DictReader(io.StringIO(report(proxy, "--format", "csv"), newline=""))
                if r["section"] == "by_model"]
    assert "'" + HOSTILE_MODEL in by_model and "'+model" in by_model
    # JSON Lines keeps what the client sent.
    jsonl = [json.loads(line) for line in proxy.cli("export", *window, "--format", "jsonl").stdout.splitlines()]
    assert [(r["model_requested"], r["end_user"]) for r in jsonl] == [
        (HOSTILE_MODEL, "=1+1"), ("+model", "@user"), ("kimi-k3.1-pro", "-1")]
