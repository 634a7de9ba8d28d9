"""decision in the report: one row per option with its monthly cost, binding limit and what would
change the answer, checked against a computation written here (tests/report/test_cost_curve.py's
`expected`, from the seeded month's records and simulation) on SQLite and PostgreSQL; first on
the Markdown and HTML page, with one line when the answer is far from close."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, date, datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from pricing import PriceBook, default_tables_dir, load_dir
from proxy.ledger.store import open_store
from proxy.report import ReportInput, build_report, render
from proxy.report.alternatives import Alternative
from proxy.report.decision import Option, decision, far_from_close
from proxy.report.load import LoadByMinute
from proxy.settings import NodeProfile, SelfHost
from tests.report.conftest import seed
from tests.report.test_cost_curve import CHEAP, DEAR, NO_PROVIDER, SELFHOST, expected, half_even, report
from tests.report.test_load_by_minute import seeded


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    found: str = request.getfixturevalue("pg_url")
    return found


def pct(v: Fraction) -> str:
    return f"{float(v):.2%}" if v < Fraction(1, 100) else f"{float(v):,.0%}"


def test_each_option_s_cost_and_what_flips_it(url: str) -> None:
    seeded(url)
    rows = json.loads(render(report(url), "json"))["decision"]
    want = expected()
    n = want["nodes"]
    dear = n * Fraction(1) + Fraction("0.001")  # rent 1 per node, ops once
    assert [x["choice"] for x in rows] == ["api", "self_host:dear", "self_host:cheap"]
    assert [Decimal(x["monthly_cost_usd"]) for x in rows] == [half_even(want["api_usd"]), half_even(dear),
                                                              half_even(want["monthly"])]
    assert rows[0]["binding"] is None and rows[2]["binding"] in ("kv_cache", "prefill", "decode")
    assert {x["nodes"] for x in rows[1:]} == {n}
    # The API is cheapest: a deployment wins at measured utilisation x its cost / the API's.
    needed = want["measured"] * want["monthly"] / want["api_usd"]
    assert needed <= 1
    you = rows[2]["utilisation"]
    assert you == pytest.approx(float(want["measured"]), abs=1e-6)
    cheap_words = f"self-hosting wins above {pct(needed)} utilisation; you are at {pct(want['measured'])}"
    assert rows[2]["flips_at"] == cheap_words
    assert rows[1]["flips_at"].startswith("self-hosting does not win even fully used")
    assert rows[0]["flips_at"] == f"the answer; against self_host:cheap, {cheap_words}"
    assert rows[0]["source"].startswith("measured") and rows[2]["source"].startswith("assumptions")


def test_far_from_close_says_so_in_one_line_first(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    seeded(url)
    r = report(url, SelfHost(equivalents=NO_PROVIDER))  # the shipped profiles against a month that cost $0.0002
    md = render(r, "md")
    far = md.index("**Not close: api is the answer; the next option, self_host:8xB300-vllm-fp8, costs ")
    assert far < md.index("## The decision") < md.index("## Totals")
    html = render(r, "html")
    assert html.index('data-far="1"') < html.index('data-section="decision"') < html.index("<h2>Cost</h2>")
    rows = [x for x in csv.DictReader(io.StringIO(render(r, "csv"))) if x["section"] == "decision"]
    assert [x["choice"] for x in rows] == ["api", "self_host:8xB300-vllm-fp8", "self_host:8xB300-vllm-dcp8",
                                           "self_host:8xMI355X-vllm-atom"]
    near = NodeProfile("near", "test", kv_cache_tokens=400_000, prefill_tokens_per_s=20_000,
                       decode_tokens_per_s=2_000, rent_usd_per_month=Decimal("0.0001388"))  # 3 nodes: 2x the API
    close = render(report(url, SelfHost(node_profiles=(near,), ops_usd_per_month=Decimal(0),
                                        equivalents=NO_PROVIDER)), "md")
    assert "## The decision" in close and "Not close" not in close


def test_self_hosting_as_the_answer(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    seeded(url)
    free = NodeProfile("free", "test", kv_cache_tokens=400_000, prefill_tokens_per_s=20_000,
                       decode_tokens_per_s=2_000, rent_usd_per_month=Decimal("0.00001"))
    sh = SelfHost(node_profiles=(CHEAP, DEAR, free), ops_usd_per_month=Decimal(0), amortization_months=36)
    rows: list[dict[str, Any]] = json.loads(render(report(url, sh), "json"))["decision"]
    best = min(rows, key=lambda x: Decimal(x["monthly_cost_usd"]))
    assert best["choice"] == "self_host:free"
    api = rows[0]
    fall = 1 - Fraction(best["monthly_cost_usd"]) / Fraction(api["monthly_cost_usd"])
    assert api["flips_at"] == f"wins if the API's prices fall by more than {pct(fall)}"
    assert best["flips_at"].startswith("the answer; against api, wins if the API's prices fall")


def test_the_cheapest_other_provider_is_an_option() -> None:
    alt = Alternative("together", "moonshotai/Kimi-K3.1-Pro", Decimal("0.00015"), (), date(2026, 11, 5))
    options = decision(2_082_000, LoadByMinute(), (), SELFHOST, alt)
    assert [(o.choice, o.monthly_cost_units) for o in options] == [("api", 2_082_000), ("provider:together", 1_500_000)]
    assert options[1].source == "genai-prices for moonshotai/Kimi-K3.1-Pro, prices from 2026-11-05, this month's tokens"
    fall = 1 - Fraction(1_500_000, 2_082_000)
    assert options[0].flips_at == f"wins if the API's prices fall by more than {pct(fall)}"
    assert options[1].flips_at == f"the answer; against api, wins if the API's prices fall by more than {pct(fall)}"


def test_self_hosting_far_from_close_beside_a_close_call() -> None:
    """The API and a provider a few cents apart, self-hosting thousands of times dearer: the answer
    is a close call, and the line says that self-hosting is not."""
    opts = (Option("api", 3_800_000_000, None, "", ""), Option("provider:doubleword", 3_400_000_000, None, "", ""),
            Option("self_host:big", 559_613_300_000_000, "prefill", "", "", nodes=2, utilisation=Fraction(1, 10**6)))
    assert far_from_close(opts) == (
        "Self-hosting is not close: its cheapest option, self_host:big, costs 164,592x as much as the answer, "
        "provider:doubleword, this month; provider:doubleword against api is the close call. The detail is below.")
    close = (*opts[:2], Option("self_host:big", 6_000_000_000, "prefill", "", "", nodes=2,
                               utilisation=Fraction(1, 10)))
    assert far_from_close(close) is None


def test_a_25_request_month_says_it_in_one_line_first(tmp_path: Path) -> None:
    """The month the issue names: 25 requests against the shipped profiles. One line above the decision
    says the answer is far from close (whichever option is the runner-up), and the detail stays below."""
    url = seed(tmp_path / "ledger.db", rows=25)
    inp = ReportInput(month="2026-11", tz=ZoneInfo("UTC"), book=PriceBook(load_dir(default_tables_dir())),
                      selfhost=SelfHost(), workload_bounds=(4096, 32768, 131072),
                      now=datetime(2026, 12, 15, tzinfo=UTC))
    r = build_report(open_store(url, read_only=True), inp)
    assert r.totals.usage.requests == 25
    md = render(r, "md")
    line = md.splitlines()[4]
    assert line.startswith(("**Not close: ", "**Self-hosting is not close: ")) and line.endswith("below.**"), line
    assert md.index(line) < md.index("## The decision") < md.index("breaks even at")
    html = render(r, "html")
    # The volume break-even is detail too: in the self-hosting section, not on the first screen, whose
    # card names the decision's answer.
    assert html.index('data-far="1"') < html.index('data-section="decision"') < html.index(
        "<h2>Self-hosting</h2>") < html.index("breaks even at")
    assert "Self-hosting breaks even at" not in html and "Cheapest this month" in html
