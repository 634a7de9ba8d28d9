"""`llmmeter report` over traffic that went through the real proxy; numbers checked independently."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from openai import OpenAI

from tests.fake_upstream import FakeUpstream
from tests.strict import require

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
    assert r["what_if"] == {"all_standard_usd": "674", "all_highspeed_usd": "1334", "without_cache_usd": "800"}
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
    assert (tenant["tenant"], tenant["input_tokens_p50"], tenant["input_tokens_p95"]) == (
        "default", 100_000_000, 100_000_000)
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
    assert {x["section"] for x in rows} == {"totals", "by_model", "by_tenant", "by_tag", "by_workload",
                                            "by_tag_workload", "daily", "hourly"}
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


CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic")


def test_html_report_renders_its_charts_in_chromium(fake: FakeUpstream, serve: Any, tmp_path: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    require(browser is not None, "Debian's chromium is not installed (make test installs it as root)")
    assert browser is not None
    proxy = serve(upstream=fake.base_url)
    client = OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    for usage, _ in WORKED:
        client.chat.completions.create(model="kimi-k3.1-pro", messages=[{"role": "user", "content": "x"}],
                                       extra_headers={"x-fake-usage": json.dumps(usage)})
    proxy.rows(expect=2)
    page = tmp_path / "report.html"
    report(proxy, "--format", "html", "--out", str(page))
    text = page.read_text()
    # Self-contained: nothing to fetch (the SVG namespace is a name, not a fetch).
    assert not [w for w in ("src=", "href=", "<link", "url(", "@import") if w in text]
    shot = tmp_path / "report.png"
    env = {**os.environ, "HOME": str(tmp_path)}  # a throwaway profile
    run = subprocess.run([browser, *CHROMIUM_FLAGS, "--enable-logging=stderr", "--v=0", "--window-size=900,2400",
                          f"--screenshot={shot}", page.as_uri()], capture_output=True, text=True, timeout=120,
                         env=env, cwd=tmp_path)
    assert shot.exists() and shot.stat().st_size > 20_000, run.stderr[-2000:]
    assert "CONSOLE" not in run.stderr or "Uncaught" not in run.stderr, run.stderr[-2000:]
    dom = subprocess.run([browser, *CHROMIUM_FLAGS, "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120, env=env, cwd=tmp_path)
    # The page's own script counts the charts the browser built: it ran, and found all five.
    assert 'data-charts="6"' in dom.stdout, dom.stderr[-2000:]
    assert dom.stdout.count('class="bar"') > 24 and "you are here" in dom.stdout
