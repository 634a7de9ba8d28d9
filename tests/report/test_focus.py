"""`llmmeter export --format focus` against FOCUS 1.2, run as the command runs on a real SQLite ledger.

The column rules checked here are FOCUS 1.2 (tag v1.2 of the specification), section "Columns":
each column's "Content Constraints" (feature level, nullability, data type, allowed values) as
proxy/focus/columns.py lists them; the formats are section "Attributes" ("Date/Time Format",
"Numeric Format", "Key-Value Format").
"""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from pricing import PriceBook, Tokens, default_tables_dir, load_dir, price_tokens
from proxy.cli import main
from proxy.focus.columns import COLUMNS, NAMES
from proxy.ledger.record import Record
from proxy.ledger.store import open_store
from proxy.report import ReportInput, build_report
from proxy.settings import SelfHost
from tests.report.conftest import seed

# FOCUS 1.2, "Columns": the columns whose feature level is Mandatory, written from the spec itself.
MANDATORY_1_2 = {
    "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency", "BillingPeriodEnd",
    "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargePeriodEnd",
    "ChargePeriodStart", "ContractedCost", "EffectiveCost", "InvoiceIssuerName", "ListCost", "PricingQuantity",
    "PricingUnit", "ProviderName", "PublisherName", "ServiceCategory", "ServiceName"}
DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")  # "Date/Time Format": YYYY-MM-DDTHH:mm:ssZ
NUMBER = re.compile(r"^-?\d+(\.\d+)?$")  # "Numeric Format": no sign for positives, one decimal point, no units
HOSTILE = '=HYPERLINK("http://evil","x")'

TABLE = """
[[price]]
model = "m-priced"
match = ["m-priced"]
tier = "standard"
effective_from = 2026-01-01T00:00:00Z
input = "1.25"
output = "10"
cache_read = "0.125"
cache_write = "1.5"
cache_write_1h = "2.5"
web_search_per_1k = "10"
source = "test"

[[price.band]]
above_input_tokens = 200000
input = "2.5"
output = "15"

[[price]]
model = "m-fine"
match = ["m-fine"]
tier = "standard"
effective_from = 2026-01-01T00:00:00Z
input = "0.0000123456"
output = "0.3333333333"
cache_read = "0"
cache_write = "0"
source = "test: prices finer than whole units per token"
"""


def _priced(i: int, start: datetime, name: str, t: Tokens, book: PriceBook, **over: object) -> Record:
    model = name
    price = book.resolve(model, "standard", start)
    assert price is not None
    p = price_tokens(price.price, t)
    fields: dict[str, object] = dict(
        id=f"r{i}", start=start, tenant="search-team", endpoint="messages", stream=False, code=200, outcome="ok",
        upstream="anthropic", model_requested=model, model=model, tier="standard", input_tokens=t.input,
        cache_read_tokens=t.cache_read, cache_write_tokens=t.cache_write, cache_write_1h_tokens=t.cache_write_1h,
        output_tokens=t.output, web_search_calls=t.web_search_calls, price_model=model, price_tier="standard",
        price_effective_from=price.price.effective_from, cost_units=p.cost.total, fee_units=p.cost.fees,
        price_band=p.band, tag="rag-search")
    fields.update(over)
    return Record(**fields)  # type: ignore[arg-type]


@pytest.fixture
def prices(tmp_path: Path) -> Path:
    d = tmp_path / "prices"
    d.mkdir()
    (d / "test.toml").write_text(TABLE)
    return d


@pytest.fixture
def ledger(tmp_path: Path, prices: Path) -> tuple[str, list[Record]]:
    book = PriceBook(load_dir(prices))
    d1, d2 = datetime(2026, 11, 3, 14, tzinfo=UTC), datetime(2026, 11, 4, 23, 59, tzinfo=UTC)
    records = [
        _priced(1, d1, "m-priced", Tokens(1000, 2000, 300, 400, 50, 3), book),
        _priced(2, d1, "m-priced", Tokens(10, 0, 0, 7, 0, 0), book),  # same day and key: summed with r1
        _priced(3, d1, "m-priced", Tokens(250_000, 0, 0, 100, 0, 0), book),  # the long-context band
        _priced(4, d2, "m-fine", Tokens(123_457, 0, 0, 99_999, 0, 0), book, tenant="agents", tag=None),
        Record(id="r5", start=d2, tenant="agents", endpoint="chat", stream=False, code=200, outcome="ok",
               upstream="local", model_requested="m-unknown", input_tokens=40, output_tokens=2),  # unpriced
        Record(id="r6", start=d2, tenant="agents", endpoint="models", stream=False, code=200, outcome="ok",
               upstream="local"),  # no usage: no row
    ]
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    store = open_store(url)
    store.migrate()
    w = store.writer()
    w.insert_many(records)
    w.close()
    return url, records


def export(tmp_path: Path, url: str, prices: Path, *extra: str, start: str = "2026-11-01",
           end: str = "2026-12-01") -> list[dict[str, str]]:
    out = tmp_path / "focus.csv"
    assert main(["export", "--from", start, "--to", end, "--format", "focus", "--db", url, "--prices", str(prices),
                 "--out", str(out), *extra]) == 0
    text = out.read_text(encoding="utf-8")
    assert text.splitlines()[0] == ",".join(NAMES)
    return list(csv.DictReader(io.StringIO(text, newline="")))


def check_row(row: dict[str, str]) -> None:
    """One row against the column list: present, typed, allowed, null only where FOCUS 1.2 allows."""
    assert set(row) == set(NAMES)
    for col in COLUMNS:
        value = row[col.name]
        if value == "":
            assert col.nullable, f"{col.name} must not be null"
            continue
        if col.type == "Decimal":
            assert NUMBER.match(value), f"{col.name}={value!r} is not a FOCUS decimal"
        elif col.type == "Date/Time":
            assert DATETIME.match(value), f"{col.name}={value!r} is not a FOCUS date/time"
        elif col.type == "JSON":
            assert isinstance(json.loads(value), dict), f"{col.name} is not a key-value object"
        if col.allowed:
            assert value in col.allowed, f"{col.name}={value!r} is not one of {col.allowed}"


def test_the_column_list_has_every_mandatory_column_of_focus_1_2() -> None:
    assert {c.name for c in COLUMNS if c.level == "Mandatory"} == MANDATORY_1_2
    assert len(NAMES) == len(set(NAMES))
    assert all(c.level == "Custom" for c in COLUMNS if c.name.startswith("x_"))


def test_every_row_meets_the_column_rules(tmp_path: Path, ledger: tuple[str, list[Record]], prices: Path) -> None:
    url, _ = ledger
    rows = export(tmp_path, url, prices)
    assert rows
    for row in rows:
        check_row(row)
        assert (row["ChargeCategory"], row["ServiceCategory"], row["ChargeFrequency"], row["BillingCurrency"]) == (
            "Usage", "AI and Machine Learning", "Usage-Based", "USD")
        assert row["BilledCost"] == row["EffectiveCost"] == row["ListCost"] == row["ContractedCost"]
        assert row["ProviderName"] == row["PublisherName"] == row["InvoiceIssuerName"] == row["BillingAccountId"]
        assert (row["BillingPeriodStart"], row["BillingPeriodEnd"]) == ("2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z")


def test_one_row_per_day_and_category_with_list_prices(tmp_path: Path, ledger: tuple[str, list[Record]],
                                                         prices: Path) -> None:
    url, records = ledger
    rows = export(tmp_path, url, prices)
    by = {(r["ChargePeriodStart"], r["x_Model"], r["x_PriceBand"], r["x_TokenCategory"]): r for r in rows}
    day1 = "2026-11-03T00:00:00Z"
    inp = by[(day1, "m-priced", "0", "input")]
    assert (inp["ConsumedQuantity"], inp["ConsumedUnit"], inp["PricingQuantity"], inp["PricingUnit"]) == (
        "1010", "Tokens", "0.00101", "1000000 Tokens")  # r1 and r2 summed
    assert (inp["ListUnitPrice"], inp["ChargePeriodEnd"], inp["PricingCategory"]) == (
        "1.25", "2026-11-04T00:00:00Z", "Standard")
    assert json.loads(inp["Tags"]) == {"tenant": "search-team", "tag": "rag-search"}
    assert inp["SkuId"] == "anthropic/m-priced/standard/input" and inp["SkuPriceId"].startswith(inp["SkuId"])
    fee = by[(day1, "m-priced", "0", "web_search")]
    assert (fee["ConsumedQuantity"], fee["ConsumedUnit"], fee["PricingQuantity"], fee["PricingUnit"],
            fee["ListUnitPrice"], fee["BilledCost"]) == ("3", "Requests", "0.003", "1000 Requests", "10", "0.03")
    assert by[(day1, "m-priced", "200000", "input")]["ListUnitPrice"] == "2.5"  # the band's own price
    assert by[(day1, "m-priced", "0", "cache_write_1h")]["ListUnitPrice"] == "2.5"
    # Whole-unit prices: ListUnitPrice × PricingQuantity is ListCost exactly (FOCUS 1.2, ListCost).
    for r in rows:
        if r["x_Model"] == "m-priced":
            assert Decimal(r["ListUnitPrice"]) * Decimal(r["PricingQuantity"]) == Decimal(r["ListCost"])
    # Each record's rows add up to its cost, to the 10^-10 USD unit.
    total = sum(Decimal(r["BilledCost"]) for r in rows)
    assert total == sum(Decimal(r.cost_units or 0) for r in records) / 10**10
    unpriced = [r for r in rows if r["x_Model"] == "m-unknown"]
    assert {r["x_TokenCategory"] for r in unpriced} == {"input", "output"}
    assert all(r["x_Unpriced"] == "true" and r["BilledCost"] == "0" and r["ListUnitPrice"] == ""
               and r["PricingCategory"] == "Other" and r["SkuPriceId"] == "" for r in unpriced)
    assert not any(r["x_Model"] == "" for r in rows)


def test_a_range_cut_inside_a_day_clips_the_charge_period(tmp_path: Path, ledger: tuple[str, list[Record]],
                                                          prices: Path) -> None:
    url, _ = ledger
    rows = export(tmp_path, url, prices, "--tz", "Asia/Kolkata", start="2026-11-04", end="2026-11-06")
    for row in rows:
        check_row(row)
    starts = {(r["ChargePeriodStart"], r["ChargePeriodEnd"]) for r in rows}
    assert starts == {("2026-11-04T00:00:00Z", "2026-11-05T00:00:00Z")}  # d2 23:59 UTC; d1 is before 18:30 UTC


def test_client_text_never_opens_as_a_formula(tmp_path: Path, prices: Path) -> None:
    book = PriceBook(load_dir(prices))
    r = _priced(1, datetime(2026, 11, 3, tzinfo=UTC), "m-priced", Tokens(5, 0, 0, 5), book,
                tenant="@x", tag="+x", upstream="-up", model=HOSTILE, model_requested=HOSTILE)
    url = f"sqlite:///{tmp_path / 'hostile.db'}"
    store = open_store(url)
    store.migrate()
    w = store.writer()
    w.insert_many([r])
    w.close()
    for row in export(tmp_path, url, prices):
        for name in ("SubAccountId", "SubAccountName"):
            assert row[name] == "'@x"
        for name in ("ProviderName", "PublisherName", "InvoiceIssuerName", "BillingAccountId", "BillingAccountName"):
            assert row[name] == "'-up"
        assert row["SkuId"].startswith("'-up/")
        assert row["ServiceName"] == row["x_Model"] == "'" + HOSTILE
        assert row["ChargeDescription"].startswith("'" + HOSTILE)
        assert json.loads(row["Tags"]) == {"tenant": "@x", "tag": "+x"}  # JSON starts with "{": left as written
        assert row["BilledCost"] == row["ListCost"] and NUMBER.match(row["BilledCost"])


def test_the_sum_of_billed_cost_is_the_report_total(tmp_path: Path) -> None:
    """The seeded month (shipped price tables, unpriced traffic too) in two zones: the rows' BilledCost
    adds up to the report's total cost for the same range, exactly."""
    url = seed(tmp_path / "seeded.db", rows=1500)
    book = PriceBook(load_dir(default_tables_dir()))
    for tz in ("UTC", "America/New_York"):
        report = build_report(open_store(url, read_only=True),
                              ReportInput(month="2026-11", tz=ZoneInfo(tz), book=book, selfhost=SelfHost(),
                                          workload_bounds=(4096, 32768, 131072),
                                          now=datetime(2026, 12, 15, tzinfo=UTC)))
        rows = export(tmp_path, url, default_tables_dir(), "--tz", tz)
        billed = sum(Decimal(r["BilledCost"]) for r in rows)
        assert billed == Decimal(report.totals.usage.cost_units) / 10**10 and billed > 0
        assert any(r["x_Unpriced"] == "true" for r in rows)
