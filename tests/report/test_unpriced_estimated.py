"""SPEC "Monthly report" version 3, `unpriced_estimated`: the month's requests with no price or
with estimated usage, their tokens, and what they would cost at the nearest known price; from a
real ledger on SQLite and PostgreSQL, in every format. Every dollar figure is worked out by hand."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from pricing import Price, PriceBook, Tokens, price_tokens
from proxy.ledger.record import Record
from proxy.ledger.store import open_store
from proxy.report import Report, ReportInput, build_report, render
from proxy.report.unpriced import Nearest
from proxy.settings import SelfHost
from tests.report.dom import Page

T0 = datetime(2026, 1, 1, tzinfo=UTC)
AT = datetime(2026, 11, 10, 14, 0, tzinfo=UTC)
D = Decimal


def _price(model: str, i: str, o: str, at: datetime = T0, match: tuple[str, ...] = (), tier: str = "standard"
           ) -> Price:
    return Price(model=model, tier=tier, effective_from=at, input=D(i), output=D(o), cache_read=D(i) / 10,
                 cache_write=D(i), source="test", match=match)


SONNET = _price("claude-sonnet-4-5", "3", "15")
# Known by name before its first price: a record written on Nov 10 has no entry in force.
KIMI_K9 = _price("kimi-k9", "1", "2", at=datetime(2026, 11, 20, tzinfo=UTC))
BOOK = PriceBook([SONNET, KIMI_K9, _price("gpt-7", "5", "20"), _price("gpt-7-mini", "1", "4"),
                  _price("claude-opus-4", "15", "75"), _price("claude-opus-4-1", "15", "75"),
                  _price("claude-3-5-haiku", "0.8", "4", match=("claude-3-5-haiku-20241022",))])


def rec(rid: str, requested: str, model: str | None, input_tokens: int, output_tokens: int, *,
        estimated: bool = False, priced: bool = False, at: datetime = AT, tenant: str = "default",
        endpoint: str = "chat", outcome: str = "ok") -> Record:
    used = Tokens(input=input_tokens, cache_read=0, cache_write=0, output=output_tokens)
    cost = price_tokens(SONNET, used).cost.total if priced else None
    return Record(id=rid, start=at, tenant=tenant, endpoint=endpoint, stream=False, code=200, outcome=outcome,
                  upstream="api", model_requested=requested, model=model, tier="standard" if model else None,
                  input_tokens=input_tokens, output_tokens=output_tokens,
                  usage_source="estimated" if estimated else "upstream", cost_units=cost,
                  price_model="claude-sonnet-4-5" if priced else None, price_tier="standard" if priced else None,
                  price_effective_from=T0 if priced else None, price_band=0 if priced else None,
                  fee_units=0 if priced else None, workload="short")


RECORDS = [
    # No model known: priced at the one whose name it extends, at standard: 1,000 x $3/M + 100 x $15/M = $0.0045.
    rec("u1", "claude-sonnet-4-5-20991231", None, 1000, 100),
    # The name after "provider/": 2,000 x $3/M = $0.006.
    rec("u2", "anthropic/claude-sonnet-4-5", None, 2000, 0, at=AT + timedelta(hours=1)),
    # No family in the tables: counted, not priced.
    rec("u3", "gpt-9", None, 500, 50),
    rec("e2", "gpt-9", None, 100, 10, estimated=True, at=AT + timedelta(days=1)),  # unpriced and estimated
    # Known, but its first entry came later: that entry. 1,000 x $1/M + 100 x $2/M = $0.0012.
    rec("u4", "kimi-k9", "kimi-k9", 1000, 100),
    # Estimated, priced at its own entry: 10,000 x $3/M + 1,000 x $15/M = $0.045, in the totals.
    rec("e1", "claude-sonnet-4-5", "claude-sonnet-4-5", 10_000, 1000, estimated=True, priced=True),
    # Not in the section: priced from the upstream's usage; refused by a budget; not a metered endpoint;
    # another month.
    rec("ok", "claude-sonnet-4-5", "claude-sonnet-4-5", 4000, 400, priced=True),
    rec("rej", "gpt-9", None, 0, 0, outcome="rejected"),
    rec("list", "gpt-9", None, 0, 0, endpoint="models"),
    rec("oct", "gpt-9", None, 700, 70, at=datetime(2026, 10, 31, 23, 59, tzinfo=UTC)),
    # Another tenant's unpriced request.
    rec("t2", "claude-sonnet-4-5-20991231", None, 3000, 0, tenant="other"),
]


def build(url: str, tenant: str | None = None) -> Report:
    return build_report(open_store(url, read_only=True), ReportInput(
        month="2026-11", tz=ZoneInfo("UTC"), book=BOOK, selfhost=SelfHost(), workload_bounds=(4096, 32768, 131072),
        now=datetime(2026, 12, 2, tzinfo=UTC), tenant=tenant))


def seed(url: str) -> str:
    store = open_store(url)
    store.migrate()
    w = store.writer()
    w.insert_many(RECORDS)
    w.close()
    return url


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "sqlite":
        return seed(f"sqlite:///{tmp_path / 'ledger.db'}")
    monkeypatch.chdir(tmp_path)  # a PostgreSQL ledger journals under ./data/journal
    return seed(request.getfixturevalue("pg_url"))


@pytest.fixture(scope="module")
def sqlite_report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    return build(seed(f"sqlite:///{tmp_path_factory.mktemp('unpriced') / 'ledger.db'}"), tenant="default")


def section(r: Report) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(render(r, "json"))["unpriced_estimated"]
    return out


def test_the_section_on_each_ledger(url: str) -> None:
    r = build(url, tenant="default")
    s = section(r)
    # u1, u2, u3, e2, u4 unpriced; e1 and e2 estimated; e2 counted once.
    assert (s["requests"], s["unpriced_requests"], s["estimated_requests"]) == (6, 5, 2)
    # The same counts the totals have.
    d = json.loads(render(r, "json"))
    assert (d["totals"]["unpriced_requests"], d["totals"]["estimated_requests"]) == (5, 2)
    # 660 (gpt-9) + 1,100 (u1) + 2,000 (u2) + 1,100 (u4) + 11,000 (e1).
    assert (s["tokens"], s["unpriced_tokens"], s["estimated_tokens"]) == (15_860, 4860, 11_110)
    # $0.0045 + $0.006 + $0.0012 at the nearest prices, + e1's own $0.045; gpt-9 has none.
    assert (s["cost_at_nearest_usd"], s["estimated_cost_usd"], s["unpriced_without_price_requests"]) == (
        "0.0567", "0.045", 2)
    assert [(x["model"], x["requests"], x["unpriced_requests"], x["estimated_requests"], x["tokens"], x["cost_usd"],
             x["nearest_model"], x["nearest_tier"], x["cost_at_nearest_usd"]) for x in s["models"]] == [
        ("gpt-9", 2, 2, 1, 660, "0", None, None, None),
        ("anthropic/claude-sonnet-4-5", 1, 1, 0, 2000, "0", "claude-sonnet-4-5", "standard", "0.006"),
        ("claude-sonnet-4-5", 1, 0, 1, 11_000, "0.045", None, None, "0.045"),
        ("claude-sonnet-4-5-20991231", 1, 1, 0, 1100, "0", "claude-sonnet-4-5", "standard", "0.0045"),
        ("kimi-k9", 1, 1, 0, 1100, "0", "kimi-k9", "standard", "0.0012")]
    # The whole proxy: the other tenant's 3,000 tokens at $3/M too.
    whole = section(build(url))
    assert (whole["requests"], whole["cost_at_nearest_usd"]) == (7, "0.0657")


def test_nothing_unpriced_or_estimated_reads_no_requests(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    store = open_store(url)
    store.migrate()
    w = store.writer()
    w.insert_many([r for r in RECORDS if r.id == "ok"])
    w.close()
    r = build(url)
    assert section(r) == {"requests": 0, "tokens": 0, "cost_at_nearest_usd": "0", "models": [],
                          "unpriced_requests": 0, "unpriced_tokens": 0, "unpriced_without_price_requests": 0,
                          "estimated_requests": 0, "estimated_tokens": 0, "estimated_cost_usd": "0"}
    assert "No unpriced and no estimated requests this month" in render(r, "md")
    assert 'data-section="unpriced_estimated"' in render(r, "html")


@pytest.mark.parametrize(("name", "nearest"), [
    ("claude-sonnet-4-5", "claude-sonnet-4-5"),  # the tables know it now
    ("gpt-7-nano", "gpt-7"),  # the longest cut the tables name
    ("gpt-7-mini-2099-01-01", "gpt-7-mini"),
    ("openai/gpt-7-mini", "gpt-7-mini"),
    ("claude-3-5-haiku-20991231", "claude-3-5-haiku"),  # every known claude-3-5-haiku-* name is one model
    ("claude-opus-9", None),  # claude-opus-4 and claude-opus-4-1: no single family
    ("gpt-9", None), ("gpt", None), ("", None),
])
def test_nearest_model(name: str, nearest: str | None) -> None:
    assert Nearest(BOOK).model(name) == nearest


def test_markdown_and_csv(sqlite_report: Report) -> None:
    md = render(sqlite_report, "md")
    assert "## Unpriced and estimated" in md
    # Requests with no price hold nothing of the report's cost: "unpriced", never $0.00.
    assert "| gpt-9 | - | api | 2 | 2 | 1 | 660 | unpriced | none known | - |" in md
    assert "| kimi-k9 | standard | api | 1 | 1 | 0 | 1,100 | unpriced | kimi-k9 / standard | $0.0012 |" in md
    assert "| claude-sonnet-4-5 | standard | api | 1 | 0 | 1 | 11,000 | $0.04 | own price | $0.04 |" in md
    assert "2 unpriced requests have no known price at all." in md
    rows = [r for r in csv.DictReader(io.StringIO(render(sqlite_report, "csv"), newline=""))
            if r["section"] == "unpriced_estimated"]
    assert [(r["model"], r["tokens"], r["nearest_model"], r["cost_at_nearest_usd"]) for r in rows] == [
        ("gpt-9", "660", "", ""), ("anthropic/claude-sonnet-4-5", "2000", "claude-sonnet-4-5", "0.006"),
        ("claude-sonnet-4-5", "11000", "", "0.045"),
        ("claude-sonnet-4-5-20991231", "1100", "claude-sonnet-4-5", "0.0045"), ("kimi-k9", "1100", "kimi-k9", "0.0012")]


def test_html_in_chromium(sqlite_report: Report, tmp_path: Path) -> None:
    from tests.report import browser

    browser.chromium()
    page = tmp_path / "report.html"
    page.write_text(render(sqlite_report, "html"), encoding="utf-8")
    dom = Page(browser.dump_dom(page))
    table = {t.section: t for t in dom.tables}["unpriced_estimated"]
    assert table.headers[:4] == ["model", "tier", "upstream", "requests count"]
    assert all(len(row) == len(table.headers) for row in table.rows)
    assert [row[8][1] for row in table.rows] == ["none known", "claude-sonnet-4-5 / standard", "own price",
                                                 "claude-sonnet-4-5 / standard", "kimi-k9 / standard"]
    assert all(cls == "n" for row in table.rows for cls, _ in row[3:8])
    assert table.total[0] == "Total" and table.total[3] == "6" and table.total[-1] == "$0.06"
    assert "2 unpriced requests have no known price at all." in dom.text
