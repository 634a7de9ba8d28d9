"""`llmmeter reprice` on a real SQLite and PostgreSQL ledger: records priced with the entry in
force at their start (the meter's resolution), nothing written without --apply, priced records
left alone with --only-unpriced and listed by id without it, never unpriced, flagged, and the
hourly rollup equal to the requests afterwards (the report equals a sum over export), also while
records are being imported."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from pricing import PriceBook, load_dir
from proxy.ledger import Ledger
from proxy.ledger.record import Record
from proxy.ledger.reprice import Summary, reprice_record, run, write_summary
from proxy.ledger.store import HourlyRow, SqlStore, open_store
from proxy.ledger.store.rows import HOUR_US, to_micros
from proxy.ledger.store.sql import HOURLY_SQL
from proxy.report import ReportInput, build_report
from proxy.settings import SelfHost
from tests.ledger.helpers import full_record

NOV = (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))
UNITS = 10**10  # per USD
TABLE = """
[[price]]
model = "alpha"
match = ["alpha", "alpha-2026"]
tier = "standard"
effective_from = 2026-10-01T00:00:00Z
input = "1.00"
output = "2.00"
cache_read = "0.10"
cache_write = "1.25"
source = "test"

[[price]]
model = "alpha"
tier = "standard"
effective_from = 2026-11-15T00:00:00Z
input = "3.00"
output = "6.00"
cache_read = "0.30"
cache_write = "3.75"
source = "test: a later price"

[[price]]
model = "alpha"
tier = "batch"
effective_from = 2026-10-01T00:00:00Z
input = "0.50"
output = "1.00"
cache_read = "0.05"
cache_write = "0.625"
source = "test"

[[price]]
model = "beta"
tier = "standard"
effective_from = 2026-10-01T00:00:00Z
input = "0.50"
output = "1.50"
cache_read = "0.05"
cache_write = "0.50"
source = "test"
"""
ALPHA_TOKENS = dict(input_tokens=1_000_000, cache_read_tokens=2_000_000, cache_write_tokens=400_000,
                    output_tokens=500_000)


def at(day: int, hour: int, minute: int = 0, month: int = 11) -> datetime:
    return datetime(2026, month, day, hour, minute, tzinfo=UTC)


def unpriced(rid: str, start: datetime, **over: object) -> Record:
    """A record as the meter wrote it when no table knew its model."""
    fields: dict[str, object] = dict(
        id=rid, start=start, model=None, tier="standard", model_requested="alpha-2026", response_model="alpha-2026",
        flags=[], price_model=None, price_tier=None, price_effective_from=None, cost_units=None, fee_units=None,
        price_band=None, cache_write_1h_tokens=0, web_search_calls=0, provider_cost_units=None,
        usage_source="upstream", reasoning_tokens=None, **ALPHA_TOKENS)
    fields.update(over)
    return full_record(0, **fields)


def priced_beta(rid: str, start: datetime, cost_units: int, **over: object) -> Record:
    fields: dict[str, object] = dict(
        id=rid, start=start, model="beta", tier="standard", model_requested="beta", response_model="beta",
        flags=[], price_model="beta", price_tier="standard", price_effective_from=datetime(2026, 10, 1, tzinfo=UTC),
        cost_units=cost_units, fee_units=0, price_band=0, cache_write_1h_tokens=0, web_search_calls=0,
        provider_cost_units=None, input_tokens=2_000_000, cache_read_tokens=0, cache_write_tokens=0,
        output_tokens=1_000_000, usage_source="upstream", reasoning_tokens=None)
    fields.update(over)
    return full_record(0, **fields)


def ledger_records() -> list[Record]:
    return [
        # Unpriced when written (the table did not know alpha then; one failed to price).
        unpriced("u1", at(3, 10, 5), flags=["pricing_failed"]),
        unpriced("u2", at(20, 12, 30)),  # after the later alpha price
        unpriced("u3", at(3, 11), endpoint="batch", tier="batch", input_tokens=1_000_000, cache_read_tokens=0,
                 cache_write_tokens=0, output_tokens=1_000_000),
        unpriced("m1", at(4, 9), model_requested="mystery-9", response_model="mystery-9"),  # no entry now either
        unpriced("out", at(2, 8, month=12)),  # outside the range
        unpriced("rej", at(3, 10, 6), outcome="rejected", code=429, input_tokens=0, cache_read_tokens=0,
                 cache_write_tokens=0, output_tokens=0),
        # Priced when written: p1 at a figure the tables no longer give, p2 as they give it.
        priced_beta("p1", at(5, 7), 99_900_000_000),
        priced_beta("p2", at(5, 7, 30), 25_000_000_000),
    ]


@pytest.fixture
def book(tmp_path: Path) -> PriceBook:
    (tmp_path / "prices").mkdir()
    (tmp_path / "prices" / "test.toml").write_text(TABLE)
    return PriceBook(load_dir(tmp_path / "prices"))


@pytest.fixture
def ledger(db_url: str, ledgers: list[Ledger]) -> Ledger:
    led = Ledger(db_url)
    ledgers.append(led)
    led.start()
    for r in ledger_records():
        led.append(r)
    assert led.flush(10)
    return led


def by_id(store: SqlStore) -> dict[str, Record]:
    return {r.id: r for r in store.query(datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC), None)}


def scanned(store: SqlStore, lo: datetime, hi: datetime) -> set[HourlyRow]:
    """HOURLY_SQL straight over the requests of [lo, hi): what the rollup must hold."""
    m = store.mark
    rows = store._read(HOURLY_SQL.format(where=f"start >= {m} AND start < {m}"), (to_micros(lo), to_micros(hi)))
    return {HourlyRow.from_sums(row) for row in rows}


def assert_rollup_consistent(store: SqlStore, lo: datetime = NOV[0], hi: datetime = NOV[1] + timedelta(days=7)
                             ) -> None:
    assert to_micros(lo) % HOUR_US == 0 and to_micros(hi) % HOUR_US == 0
    assert set(store.hourly_rows(lo, hi, None)) == scanned(store, lo, hi)


def report_equals_export(store: SqlStore, book: PriceBook) -> tuple[int, int]:
    """The month's report total and unpriced count, after checking them against a sum over export."""
    inp = ReportInput(month="2026-11", tz=ZoneInfo("UTC"), book=book, selfhost=SelfHost(),
                      workload_bounds=(4096, 32768, 131072), now=datetime(2026, 12, 15, tzinfo=UTC))
    report = build_report(store, inp)
    rows = list(store.query(*NOV, None))
    assert report.totals.usage.cost_units == sum(r.cost_units or 0 for r in rows)
    unpriced = sum(1 for r in rows if r.cost_units is None and r.outcome != "rejected")
    assert report.totals.unpriced_requests == unpriced
    return report.totals.usage.cost_units, unpriced


def text(summary: Summary, only_unpriced: bool, applied: bool) -> str:
    out = StringIO()
    write_summary(summary, *NOV, only_unpriced, applied, out)
    return out.getvalue()


def test_a_dry_run_writes_nothing_and_says_what_would_change(ledger: Ledger, book: PriceBook) -> None:
    store = ledger.store
    before = by_id(store)
    rollup = store.hourly_rows(*NOV, None)
    summary = run(store, book, *NOV)
    assert by_id(store) == before and store.hourly_rows(*NOV, None) == rollup
    # u1 $2.70 (Nov 3, first alpha price), u2 $8.10 (the later one), u3 $1.50 (batch), p1 $9.99 -> $2.50.
    assert summary.changed["alpha"].rows == 3 and summary.changed["alpha"].were_unpriced == 3
    assert summary.changed["alpha"].after_units == 27_000_000_000 + 81_000_000_000 + 15_000_000_000
    beta = summary.changed["beta"]
    assert (beta.rows, beta.were_priced, beta.before_units, beta.after_units) == (1, 1, 99_900_000_000,
                                                                                  25_000_000_000)
    assert summary.still_unpriced == {"mystery-9": 1}
    assert summary.examined == 6  # the rejected request and December's record are never looked at
    out = text(summary, False, False)
    assert "p1 2026-11-05T07:00:00.000Z beta: $9.99 (standard from 2026-10-01) -> $2.50" in out
    assert "nothing written: run again with --apply" in out
    assert "alpha" in out and "+$12.30" in out and "-$7.49" in out and "+$4.81" in out


def test_only_unpriced_apply_fills_unpriced_records_and_keeps_the_rollup(ledger: Ledger, book: PriceBook,
                                                                         db_url: str) -> None:
    store = open_store(db_url)
    before = by_id(store)
    cost_before, unpriced_before = report_equals_export(store, book)
    assert unpriced_before == 4  # u1, u2, u3, m1
    summary = run(store, book, *NOV, only_unpriced=True, apply=True)
    after = by_id(store)
    assert summary.rows == 3 and "beta" not in summary.changed
    u1, u2, u3 = after["u1"], after["u2"], after["u3"]
    assert (u1.model, u1.tier, u1.price_model, u1.price_tier, u1.cost_units) == (
        "alpha", "standard", "alpha", "standard", 27_000_000_000)
    assert u1.price_effective_from == datetime(2026, 10, 1, tzinfo=UTC) and u1.price_band == 0 and u1.fee_units == 0
    assert "pricing_failed" not in u1.flags and {"repriced", "priced_later"} <= set(u1.flags)
    assert (u2.cost_units, u2.price_effective_from) == (81_000_000_000, datetime(2026, 11, 15, tzinfo=UTC))
    assert (u3.tier, u3.price_tier, u3.cost_units) == ("batch", "batch", 15_000_000_000)
    # Priced records, the unknown model, the rejected request and December: untouched.
    for rid in ("p1", "p2", "m1", "rej", "out"):
        assert after[rid] == before[rid], rid
    # Nothing else of a repriced record changed.
    assert u1.input_tokens == before["u1"].input_tokens and u1.tenant == before["u1"].tenant
    assert_rollup_consistent(store)
    cost_after, unpriced_after = report_equals_export(store, book)
    assert unpriced_after == 1 and cost_after == cost_before + 123_000_000_000
    # A second run finds nothing more to do.
    again = run(store, book, *NOV, only_unpriced=True, apply=True)
    assert again.rows == 0 and again.examined == 4 and by_id(store) == after


def test_apply_without_only_unpriced_reprices_priced_records_and_lists_them(ledger: Ledger, book: PriceBook,
                                                                            db_url: str) -> None:
    store = open_store(db_url)
    before = by_id(store)
    summary = run(store, book, *NOV, apply=True)
    after = by_id(store)
    assert summary.rows == 4 and summary.priced_changed == 1
    p1 = after["p1"]
    assert p1.cost_units == 25_000_000_000 and "repriced" in p1.flags and "priced_later" not in p1.flags
    assert after["p2"] == before["p2"]  # its price is the one the tables give: not touched, not flagged
    out = text(summary, False, True)
    assert "p1 2026-11-05T07:00:00.000Z" in out and "nothing written" not in out
    assert_rollup_consistent(store)
    report_equals_export(store, book)
    # A table that no longer prices beta never unprices it.
    bare = PriceBook([p for p in book.prices if p.model != "beta"])
    gone = run(store, bare, *NOV, apply=True)
    assert by_id(store)["p1"] == p1 and gone.kept_priced == 2 and gone.rows == 0


def test_a_repriced_record_reads_as_the_meter_would_have_priced_it(book: PriceBook) -> None:
    """reprice_record uses the meter's own resolution: tier hint, batch tier, band, flags."""
    rec = unpriced("x", at(3, 10), tier="priority")  # a tier alpha has no entry for: standard, flagged
    new = reprice_record(book, rec)
    assert new is not None and new.tier == "highspeed" and new.price_tier == "standard"
    assert "tier_fallback" in new.flags and new.cost_units == 27_000_000_000
    assert reprice_record(book, new) is None  # priced as the tables say: nothing to change
    # Unknown model: nothing to do.
    assert reprice_record(book, unpriced("y", at(3, 10), model_requested="zeta", response_model="zeta")) is None


def test_reprice_while_records_are_imported(db_url: str, ledgers: list[Ledger], book: PriceBook) -> None:
    """The importer of a running ledger keeps writing into the hours a repricing sums again; every
    record lands and the rollup still equals the requests."""
    led = Ledger(db_url, busy_timeout_s=30)
    ledgers.append(led)
    led.start()
    base = at(10, 0)
    for i in range(3000):
        led.append(unpriced(f"a{i:05d}", base + timedelta(seconds=i * 7)))
    assert led.flush(30)
    store = open_store(db_url)
    more = 1500  # imported while the repricing runs, into the same hours
    done = threading.Event()

    def import_more() -> None:
        for i in range(more):
            led.append(unpriced(f"b{i:05d}", base + timedelta(seconds=i * 11 + 3)))
            if i % 25 == 0:
                led.flush(10)
                time.sleep(0.005)
        done.set()

    t = threading.Thread(target=import_more)
    t.start()
    repriced = 0
    try:
        runs = 0
        while runs < 3 or not done.is_set():  # again and again while the importer writes
            repriced += run(store, book, *NOV, only_unpriced=True, apply=True).rows
            runs += 1
    finally:
        t.join()
    assert led.flush(30)
    repriced += run(store, book, *NOV, only_unpriced=True, apply=True).rows
    assert repriced == 3000 + more  # each record priced once, never twice
    rows = by_id(store)
    assert sum(1 for k in rows if k.startswith("b")) == more
    assert all(rows[f"a{i:05d}"].cost_units == 27_000_000_000 for i in range(3000))
    assert_rollup_consistent(store)
    report_equals_export(store, book)


def test_the_command(tmp_path: Path) -> None:
    """`llmmeter reprice` as a user runs it: dry run, then --apply, on a SQLite ledger."""
    db = f"sqlite:///{tmp_path / 'data' / 'ledger.db'}"
    led = Ledger(db)
    led.start()
    for r in ledger_records():
        led.append(r)
    assert led.flush(10)
    led.close()
    (tmp_path / "prices").mkdir()
    (tmp_path / "prices" / "test.toml").write_text(TABLE)

    def reprice(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "proxy", "reprice", "--db", db, "--prices",
                               str(tmp_path / "prices"), *args], capture_output=True, text=True, timeout=60,
                              cwd=tmp_path)

    dry = reprice("--from", "2026-11-01", "--to", "2026-12-01")
    assert dry.returncode == 0, dry.stderr
    assert "4 rows would change" in dry.stdout and "p1 " in dry.stdout and "--apply" in dry.stdout
    done = reprice("--from", "2026-11-01", "--to", "2026-12-01", "--only-unpriced", "--apply")
    assert done.returncode == 0, done.stderr
    assert "3 rows changed, +$12.30 in total" in done.stdout
    assert "1 records still unpriced (no entry in force at their start): mystery-9 (1)" in done.stdout
    store = open_store(db, read_only=True)
    assert by_id(store)["u1"].cost_units == 27_000_000_000 and by_id(store)["p1"].cost_units == 99_900_000_000
    bad = reprice("--from", "2026-12-01", "--to", "2026-11-01")
    assert bad.returncode == 2 and "--to must be after --from" in bad.stderr
    missing = subprocess.run([sys.executable, "-m", "proxy", "reprice", "--db", f"sqlite:///{tmp_path / 'no.db'}",
                              "--from", "2026-11-01", "--to", "2026-12-01"], capture_output=True, text=True,
                             timeout=60, cwd=tmp_path)
    assert missing.returncode == 1 and "no ledger" in missing.stderr and not (tmp_path / "no.db").exists()



def test_an_hour_whose_rollup_is_not_the_sum_of_its_requests_is_summed_again(ledger: Ledger, book: PriceBook,
                                                                              db_url: str) -> None:
    store = open_store(db_url)
    with store.repricing() as tx:  # a rollup that lost its rows (what a bug or a hand edit could leave)
        tx.session.execute(f"DELETE FROM hourly_rollup WHERE hour = {store.mark}", (to_micros(at(3, 10)) // HOUR_US,))
    assert set(store.hourly_rows(*NOV, None)) != scanned(store, *NOV)
    run(store, book, *NOV, only_unpriced=True, apply=True)
    assert_rollup_consistent(store)
    report_equals_export(store, book)
