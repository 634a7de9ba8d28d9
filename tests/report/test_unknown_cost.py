"""A cost nobody priced is unknown, never $0.00: every table and format of the report says
"unpriced" (or "≥ $X, N unpriced" beside a priced part), from a real SQLite ledger. And the
report's words agree with their numbers: "1 request", no ratio where the quiet hours are empty."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from pricing import Price, PriceBook, Tokens, price_tokens
from proxy.ledger.record import Record
from proxy.ledger.store import open_store
from proxy.report import Report, ReportInput, build_report, render
from proxy.settings import SelfHost

AT = datetime(2026, 11, 10, 14, 0, tzinfo=UTC)
PRICED = Price(model="gpt-7", tier="standard", effective_from=datetime(2026, 1, 1, tzinfo=UTC), input=Decimal(5),
               output=Decimal(20), cache_read=Decimal("0.5"), cache_write=Decimal(5), source="test")
BOOK = PriceBook([PRICED])


def rec(rid: str, model: str, tenant: str, tag: str | None, at: datetime = AT) -> Record:
    priced = model == "gpt-7"
    cost = price_tokens(PRICED, Tokens(input=1000, cache_read=0, cache_write=0, output=100)).cost.total
    return Record(id=rid, start=at, tenant=tenant, endpoint="chat", stream=False, code=200, outcome="ok",
                  upstream="api", model_requested=model, model=model if priced else None,
                  tier="standard" if priced else None, input_tokens=1000, output_tokens=100,
                  usage_source="upstream", cost_units=cost if priced else None,
                  price_model="gpt-7" if priced else None, price_tier="standard" if priced else None,
                  price_effective_from=PRICED.effective_from if priced else None, price_band=0 if priced else None,
                  fee_units=0 if priced else None, workload="short", tag=tag)


def build(tmp_path: Path, records: list[Record]) -> Report:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    store = open_store(url)
    store.migrate()
    w = store.writer()
    w.insert_many(records)
    w.close()
    return build_report(open_store(url, read_only=True), ReportInput(
        month="2026-11", tz=ZoneInfo("UTC"), book=BOOK, selfhost=SelfHost(), workload_bounds=(4096, 32768, 131072),
        now=datetime(2026, 12, 2, tzinfo=UTC)))


# Tenant "lab": 12 requests, all to a model with no price, tagged "lab-eval", all on Nov 11.
# Tenant "prod": 2 priced requests ($0.007 each) and 1 unpriced, untagged, on Nov 10.
LAB = [rec(f"lab{i}", "llama-local", "lab", "lab-eval", AT + timedelta(days=1)) for i in range(12)]
PROD = [rec("p1", "gpt-7", "prod", None), rec("p2", "gpt-7", "prod", None), rec("p3", "llama-local", "prod", None)]


def by(rows: list[dict[str, Any]], key: str, name: str) -> dict[str, Any]:
    return next(x for x in rows if x[key] == name)


def test_json_and_csv_say_unknown_not_zero(tmp_path: Path) -> None:
    r = build(tmp_path, LAB + PROD)
    d = json.loads(render(r, "json"))
    lab, prod = by(d["by_tenant"], "tenant", "lab"), by(d["by_tenant"], "tenant", "prod")
    assert (lab["cost_usd"], lab["cost_share"], lab["unpriced_requests"]) == (None, None, 12)
    # A priced part beside an unpriced request: the cost is a lower bound, and says how many it leaves out.
    assert (prod["cost_usd"], prod["cost_share"], prod["unpriced_requests"]) == ("0.014", 1.0, 1)
    assert (by(d["by_tag"], "tag", "lab-eval")["cost_usd"], by(d["by_tag"], "tag", "untagged")["cost_usd"]) == (
        None, "0.014")
    assert by(d["by_model"], "model", "llama-local")["cost_usd"] is None
    assert [(x["workload"], x["cost_usd"]) for x in d["by_tag_workload"] if x["tag"] == "lab-eval"] == [
        ("short", None)]
    day = by(d["daily"], "date", "2026-11-11")
    assert (day["cost_usd"], day["unpriced_requests"]) == (None, 12)
    assert by(d["daily"], "date", "2026-11-12")["cost_usd"] == "0"  # no traffic: a known zero
    assert (d["totals"]["cost_usd"], d["totals"]["unpriced_requests"]) == ("0.014", 13)

    rows = list(csv.DictReader(io.StringIO(render(r, "csv"), newline="")))
    lab_row = next(x for x in rows if x["section"] == "by_tenant" and x["tenant"] == "lab")
    assert (lab_row["cost_usd"], lab_row["cost_share"], lab_row["unpriced_requests"]) == ("", "", "12")
    day_row = next(x for x in rows if x["section"] == "daily" and x["date"] == "2026-11-11")
    assert day_row["cost_usd"] == ""


def _md_row(md: str, first_cell: str) -> list[str]:
    line = next(x for x in md.splitlines() if x.startswith(f"| {first_cell} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_md_and_html_tables_say_unpriced(tmp_path: Path) -> None:
    r = build(tmp_path, LAB + PROD)
    md = render(r, "md")
    for first in ("lab", "lab-eval", "2026-11-11", "llama-local"):
        cells = _md_row(md, first)
        assert "unpriced" in cells and "$0.00" not in cells, (first, cells)
        share = cells[cells.index("unpriced") + 1:cells.index("unpriced") + 2]
        assert share in ([], ["-"]), (first, cells)  # the daily table has no share column
    assert "≥ $0.01, 1 unpriced" in _md_row(md, "prod")
    assert "≥ $0.01, 13 unpriced" in md  # the headline and the totals row
    assert "**≥ $0.01, 13 unpriced** for 15 requests" in md

    html = render(r, "html")
    tenant_table = re.search(r'<table data-section="by_tenant">.*?</table>', html, re.S)
    assert tenant_table is not None
    lab_row = next(x for x in tenant_table.group(0).split("<tr>") if "<td>lab</td>" in x)
    assert ">unpriced<" in lab_row and "$0.00" not in lab_row and "0.0%" not in lab_row  # no cache-hit column
    assert "≥ $0.01<" in html  # the cost card: a lower bound


def test_a_month_of_one_request_in_one_hour_reads_in_words(tmp_path: Path) -> None:
    r = build(tmp_path, [rec("p1", "gpt-7", "prod", None)])
    md = render(r, "md")
    assert "for 1 request;" in md and "1 requests" not in md
    assert "Peak-to-off-peak ratio 0.00" not in md and "All traffic in the busiest hours" in md
    html = render(r, "html")
    assert "ratio 0.00" not in html and "all traffic in the busiest hours" in html
    assert json.loads(render(r, "json"))["peak_to_offpeak_ratio"] == 0.0  # SPEC: the number stays 0
