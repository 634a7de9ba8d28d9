"""SPEC "Monthly report" version 3, `budgets`: each [[budget]]'s periods that overlap the month,
from a real ledger on SQLite and PostgreSQL, in every format; and from `llmmeter report
--config`. Every figure is worked out by hand in the comments."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from pricing import PriceBook
from proxy import cli
from proxy.ledger.record import Record
from proxy.ledger.store import open_store
from proxy.ledger.store.base import SqlStore
from proxy.ledger.store.budget_report import period_sums
from proxy.ledger.store.budgets import Scope, standing
from proxy.ledger.store.rows import to_micros
from proxy.report import Report, ReportInput, build_report, render
from proxy.report.budgets import periods
from proxy.settings import Budget, SelfHost
from tests.report.dom import Page

USD = 10**10
RUNNING = datetime(2026, 11, 3, 12, 0, tzinfo=UTC)  # the month in progress
COMPLETE = datetime(2026, 12, 15, tzinfo=UTC)

BUDGETS = (
    # search-team's month in São Paulo (UTC-3): Oct 1 03:00Z - Nov 1 03:00Z, Nov 1 03:00Z - Dec 1 03:00Z.
    Budget("search-monthly", Decimal("10"), tenant="search-team", tz="America/Sao_Paulo", mode="enforce"),
    # Berlin days (UTC+1 in November): Nov 1 is Oct 31 23:00Z - Nov 1 23:00Z.
    Budget("rag-daily", Decimal("1"), tag="rag-search", period="day", tz="Europe/Berlin"),
    # Kolkata days (UTC+5:30) start at 18:30Z: half-hours the hourly rollup cannot answer.
    Budget("kolkata-day", Decimal("0.5"), period="day", tz="Asia/Kolkata", mode="enforce"),
    Budget("everything", Decimal("100.25")),
)


def rec(rid: str, at: datetime, tenant: str, units: int | None, tag: str | None = None, outcome: str = "ok",
        budget: str | None = None, reserved: int | None = None) -> Record:
    rejected = outcome == "rejected"
    return Record(id=rid, start=at, tenant=tenant, endpoint="chat", stream=False, code=429 if rejected else 200,
                  outcome=outcome, upstream="api", model_requested="kimi-k3.1-pro",
                  model=None if rejected else "kimi-k3.1-pro", tier=None if rejected else "standard",
                  input_tokens=0 if rejected else 1000, output_tokens=0 if rejected else 100, cost_units=units,
                  tag=tag, workload="short", flags=["budget_exceeded"] if rejected else [], budget=budget,
                  reserved_units=reserved)


def t(day: int, hour: int, minute: int = 0, month: int = 11) -> datetime:
    return datetime(2026, month, day, hour, minute, tzinfo=UTC)


RECORDS = [
    rec("oct", t(15, 9, month=10), "search-team", 1 * USD),  # São Paulo's October period only
    rec("r1", t(1, 1), "search-team", 2 * USD + 1, tag="rag-search"),  # Oct 31 22:00 in São Paulo; Berlin Nov 1
    rec("r2", t(2, 10), "search-team", 35_000_000_003),  # $3.5000000003, untagged
    rec("r3", t(2, 23, 30), "agents", USD // 4, tag="rag-search"),  # Berlin Nov 3 00:30; Kolkata Nov 3
    rec("k1", t(1, 18, 15), "agents", USD // 10),  # Kolkata Nov 1 (23:45 local)
    rec("k2", t(1, 18, 45), "agents", USD // 5),  # Kolkata Nov 2 (00:15 local)
    # Refused by search-monthly: one reserved $7.1234567891 at most, one to a model with no price (no reservation).
    rec("no1", t(2, 11), "search-team", None, outcome="rejected", budget="search-monthly", reserved=71_234_567_891),
    rec("no2", t(2, 12), "search-team", None, outcome="rejected", budget="search-monthly"),
    # Refused by a budget no longer in the config; and one refused after the report's running `now`.
    rec("no3", t(2, 13), "search-team", None, outcome="rejected", budget="old-budget", reserved=5 * USD),
    rec("no4", t(20, 13), "agents", None, outcome="rejected", budget="kolkata-day", reserved=USD),
]


def seeded(url: str) -> SqlStore:
    """RECORDS written through the real store; the ledger opened read-only, as the report opens it."""
    store = open_store(url)
    store.migrate()
    w = store.writer()
    w.insert_many(RECORDS)
    w.close()
    reader = open_store(url, read_only=True)
    assert isinstance(reader, SqlStore)
    return reader


def report(store: SqlStore, now: datetime, tenant: str | None = None, tz: str = "UTC") -> Report:
    return build_report(store, ReportInput(month="2026-11", tz=ZoneInfo(tz), book=PriceBook([]), selfhost=SelfHost(),
                                           workload_bounds=(4096, 32768, 131072), now=now, tenant=tenant,
                                           budgets=BUDGETS))


def rows(r: Report) -> list[tuple[str, str, str, str, str, int, str]]:
    d = json.loads(render(r, "json"))
    return [(b["name"], b["period_start"], b["period_end"], b["limit_usd"], b["spent_usd"], b["rejected_requests"],
             b["rejected_cost_usd"]) for b in d["budgets"]]


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A ledger holding RECORDS, on each backend."""
    if request.param == "sqlite":
        found = f"sqlite:///{tmp_path / 'ledger.db'}"
    else:
        monkeypatch.chdir(tmp_path)  # a PostgreSQL ledger journals under ./data/journal
        found = request.getfixturevalue("pg_url")
    seeded(found)
    return found


@pytest.fixture
def store(url: str) -> SqlStore:
    reader = open_store(url, read_only=True)
    assert isinstance(reader, SqlStore)
    return reader


def test_each_budget_period_overlapping_the_running_month(store: SqlStore) -> None:
    assert rows(report(store, RUNNING)) == [
        # October's São Paulo period overlaps November UTC by three hours; shown whole: $1 + $2.0000000001.
        ("search-monthly", "2026-10-01T03:00:00Z", "2026-11-01T03:00:00Z", "10", "3.0000000001", 0, "0"),
        # r2; two refused requests, one with a reservation (the unpriced one has none).
        ("search-monthly", "2026-11-01T03:00:00Z", "2026-12-01T03:00:00Z", "10", "3.5000000003", 2, "7.1234567891"),
        # Berlin days up to the one holding `now` (Nov 4 begins at Nov 3 23:00Z, after it). r1, then r3.
        ("rag-daily", "2026-10-31T23:00:00Z", "2026-11-01T23:00:00Z", "1", "2.0000000001", 0, "0"),
        ("rag-daily", "2026-11-01T23:00:00Z", "2026-11-02T23:00:00Z", "1", "0", 0, "0"),
        ("rag-daily", "2026-11-02T23:00:00Z", "2026-11-03T23:00:00Z", "1", "0.25", 0, "0"),
        # Kolkata days: r1 + k1 (18:15Z); k2 (18:45Z) + r2; r3.
        ("kolkata-day", "2026-10-31T18:30:00Z", "2026-11-01T18:30:00Z", "0.5", "2.1000000001", 0, "0"),
        ("kolkata-day", "2026-11-01T18:30:00Z", "2026-11-02T18:30:00Z", "0.5", "3.7000000003", 0, "0"),
        ("kolkata-day", "2026-11-02T18:30:00Z", "2026-11-03T18:30:00Z", "0.5", "0.25", 0, "0"),
        # Everything in November: 2.0000000001 + 3.5000000003 + 0.25 + 0.1 + 0.2.
        ("everything", "2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z", "100.25", "6.0500000004", 0, "0"),
    ]


def test_a_complete_month_lists_every_period_and_a_tenant_report_only_its_budgets(store: SqlStore) -> None:
    got = rows(report(store, COMPLETE))
    # Berlin's December 1 begins at Nov 30 23:00Z, inside November UTC: 31 Berlin days overlap it.
    assert [r[1] for r in got if r[0] == "rag-daily"][-1] == "2026-11-30T23:00:00Z"
    assert [r[0] for r in got].count("rag-daily") == 31 and [r[0] for r in got].count("kolkata-day") == 31
    # The refusal on Nov 20 (after the running report's now) is in Kolkata's Nov 20 period.
    [day20] = [r for r in got if r[0] == "kolkata-day" and r[1] == "2026-11-19T18:30:00Z"]
    assert day20[4:] == ("0", 1, "1")
    # In a New York report (Nov 1 04:00Z - Dec 1 05:00Z) the budgets keep their own periods; which
    # overlap the month changes: not São Paulo's October; its December and UTC's, two hours of each.
    ny = rows(report(store, COMPLETE, tz="America/New_York"))
    assert [r[1] for r in ny if r[0] == "search-monthly"] == ["2026-11-01T03:00:00Z", "2026-12-01T03:00:00Z"]
    assert [r[1] for r in ny if r[0] == "everything"] == ["2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z"]
    assert next(r for r in ny if r[0] == "everything") == got[-1]
    assert [r[0] for r in rows(report(store, COMPLETE, tenant="search-team"))] == ["search-monthly"] * 2
    assert rows(report(store, COMPLETE, tenant="nobody")) == []


def test_spent_is_the_figure_the_enforcing_replicas_read(url: str, store: SqlStore) -> None:
    """The report and the engine's gauge (proxy/ledger/store/budgets.py `standing`) agree, period
    by period, on both backends: the same rollup for whole hours and requests for the rest."""
    writable = open_store(url)
    assert isinstance(writable, SqlStore)
    for b in BUDGETS:
        for lo, hi in periods(b, t(1, 0), datetime(2026, 12, 1, tzinfo=UTC), COMPLETE):
            scope = Scope(b.name, to_micros(lo), to_micros(hi), b.tenant, b.tag)
            with writable.budget_locked(None) as session:
                engine = standing(session, writable.mark, scope, "", to_micros(COMPLETE))
            assert period_sums(store, scope).spent_units == engine.spent, (b.name, lo)


def test_periods_across_a_dst_change() -> None:
    # New York falls back at 02:00 on 2026-11-01: that day is 25 hours long, the next 24.
    b = Budget("ny", Decimal(1), period="day", tz="America/New_York")
    assert periods(b, t(1, 0), t(3, 0), COMPLETE) == [(t(31, 4, month=10), t(1, 4)), (t(1, 4), t(2, 5)),
                                                      (t(2, 5), t(3, 5))]
    # Periods that have not begun by `now` are left out.
    assert periods(b, t(1, 0), t(3, 0), t(1, 3, 59)) == [(t(31, 4, month=10), t(1, 4))]


@pytest.fixture
def sqlite_report(tmp_path: Path) -> Report:
    return report(seeded(f"sqlite:///{tmp_path / 'ledger.db'}"), RUNNING)


def test_csv_has_a_budgets_section_with_exact_money(sqlite_report: Report) -> None:
    table = list(csv.DictReader(io.StringIO(render(sqlite_report, "csv"), newline="")))
    budgets = [r for r in table if r["section"] == "budgets"]
    assert len(budgets) == 9
    nov = budgets[1]
    assert (nov["name"], nov["period_start"], nov["limit_usd"], nov["spent_usd"], nov["rejected_requests"],
            nov["rejected_cost_usd"]) == ("search-monthly", "2026-11-01T03:00:00Z", "10", "3.5000000003", "2",
                                          "7.1234567891")
    # Its columns come after every other version 3 section's; version 4's sections follow.
    header = next(csv.reader(io.StringIO(render(sqlite_report, "csv"))))
    at = header.index("figure")  # load_by_minute's first column
    assert header[at - 7:at] == ["name", "period_start", "period_end", "limit_usd", "spent_usd", "rejected_requests",
                                 "rejected_cost_usd"]


def test_markdown_and_html_show_each_period_in_the_budgets_zone(sqlite_report: Report) -> None:
    md = render(sqlite_report, "md")
    assert "## Budgets" in md
    assert ("| search-monthly | 2026-11 (so far) | America/Sao_Paulo | enforce | $10.00 | $3.50 | 35.0% | 2 | "
            "$7.12 |") in md
    assert "| search-monthly | 2026-10 | America/Sao_Paulo | enforce | $10.00 | $3.00 | 30.0% | 0 | $0.00 |" in md
    assert "| rag-daily | 2026-11-01 | Europe/Berlin | alert | $1.00 | $2.00 | 200.0% | 0 | $0.00 |" in md
    assert "| kolkata-day | 2026-11-03 (so far) | Asia/Kolkata |" in md
    assert "worst case" in md
    page = Page(render(sqlite_report, "html"))
    [table] = [x for x in page.tables if x.section == "budgets"]
    assert table.headers[:2] == ["budget", "period"] and len(table.rows) == 9
    assert [v for _, v in table.rows[1]][-2:] == ["2", "$7.12"]


def test_no_budgets_leave_an_empty_list_and_no_section(tmp_path: Path) -> None:
    store = seeded(f"sqlite:///{tmp_path / 'ledger.db'}")
    r = build_report(store, ReportInput(month="2026-11", tz=ZoneInfo("UTC"), book=PriceBook([]), selfhost=SelfHost(),
                                        workload_bounds=(4096, 32768, 131072), now=RUNNING))
    assert json.loads(render(r, "json"))["budgets"] == []
    assert "Budgets" not in render(r, "md") and 'data-section="budgets"' not in render(r, "html")
    assert not [row for row in csv.reader(io.StringIO(render(r, "csv"))) if row[0] == "budgets"]


def test_llmmeter_report_reads_the_budgets_of_its_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "ledger.db"
    seeded(f"sqlite:///{db}")
    key = hashlib.sha256(b"llmm-test-key").hexdigest()
    (tmp_path / "llmmeter.toml").write_text(f"""
[ledger]
url = "sqlite:///{db}"

[[tenant]]
name = "search-team"
key_sha256 = ["{key}"]

[[budget]]
name = "search-monthly"
tenant = "search-team"
tz = "America/Sao_Paulo"
limit_usd = "10"
mode = "enforce"
""")
    code = cli.main(["report", "--month", "2026-11", "--format", "json", "--config", str(tmp_path / "llmmeter.toml")])
    assert code == 0
    d: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert [(b["period_start"], b["spent_usd"], b["rejected_requests"], b["rejected_cost_usd"])
            for b in d["budgets"]] == [("2026-10-01T03:00:00Z", "3.0000000001", 0, "0"),
                                       ("2026-11-01T03:00:00Z", "3.5000000003", 2, "7.1234567891")]
