"""Money in the ledger at the caps: no overflow and no float, per record, per batch, per hour,
per month (proxy/ledger/store.py states the bound; this proves it at the caps)."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

from pricing.calculator import MAX_COST_UNITS, MAX_FEE_CALLS, MAX_PROVIDER_COST_UNITS, MAX_TOKENS, UNITS_PER_USD
from proxy.ledger import Ledger
from proxy.ledger.migrations import load
from proxy.ledger.record import Record
from proxy.ledger.store import SqliteStore, is_postgresql, sqlite_path
from proxy.ledger.store.rows import CARRY, MAX_PART_UNITS, to_row
from tests.ledger.helpers import BEFORE_005, EVER, T0, full_record

BIGINT = 2**63 - 1
# The records one UTC hour and attribution key may hold before any sum could leave BIGINT.
RECORDS_PER_HOUR = BIGINT // UNITS_PER_USD  # 922,337,203: 256,000 records a second for an hour
# The dearest record (pricing/calculator.py): five token categories at 10^9 tokens and $1 a
# token, plus 10^5 web search calls at $1,000 each.
CEILING = 5 * 10**19 + 10**18


def at_the_caps(i: int, **over: object) -> Record:
    fields: dict[str, object] = dict(input_tokens=MAX_TOKENS, cache_read_tokens=MAX_TOKENS,
                                     cache_write_tokens=MAX_TOKENS, output_tokens=MAX_TOKENS,
                                     reasoning_tokens=MAX_TOKENS, cost_units=MAX_COST_UNITS,
                                     cache_write_1h_tokens=MAX_TOKENS, web_search_calls=MAX_FEE_CALLS,
                                     fee_units=MAX_PART_UNITS, provider_cost_units=MAX_PROVIDER_COST_UNITS)
    fields.update(over)
    return full_record(i, **fields)


def execute(url: str, sql: str) -> list[tuple[object, ...]]:
    if is_postgresql(url):
        with psycopg.connect(url, autocommit=True) as pg:
            cur = pg.execute(sql.encode())
            return cur.fetchall() if cur.description else []
    con = sqlite3.connect(sqlite_path(url), isolation_level=None)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_the_bound_holds_for_every_sum_at_the_caps() -> None:
    """The arithmetic the schema relies on, at the caps (5 x 10^9 tokens at $1 each per record, and
    10^5 calls at $1,000: 5.1 x 10^19 units)."""
    assert MAX_COST_UNITS <= CEILING
    usd_part, rest_part = CEILING // UNITS_PER_USD, UNITS_PER_USD - 1  # per record, at most
    carry = CEILING // CARRY
    assert usd_part == 51 * 10**8 and carry == 51  # cost_carry per record, at most
    assert RECORDS_PER_HOUR * usd_part <= BIGINT  # hourly_rollup.cost_usd and SUM() over an hour
    assert RECORDS_PER_HOUR * rest_part <= BIGINT  # SUM of the rests before they are carried
    assert 2 * rest_part <= BIGINT  # the rollup's rest plus a batch's (each below 10^10)
    assert RECORDS_PER_HOUR * 5 * MAX_TOKENS <= BIGINT  # token sums, even input side summed over an hour
    assert carry * (CARRY // UNITS_PER_USD) + (CARRY - 1) // UNITS_PER_USD <= BIGINT  # one record's dollars
    assert CARRY - 1 <= BIGINT
    # 007: fees and the provider's cost, each at most 10^18 units a record: one BIGINT, no carry;
    # summed as whole dollars (10^8 a record) and the rest, like the cost.
    assert MAX_PART_UNITS == MAX_PROVIDER_COST_UNITS == 10**18 <= BIGINT
    assert MAX_FEE_CALLS * 10**13 <= MAX_PART_UNITS  # every call at $1,000
    assert RECORDS_PER_HOUR * (MAX_PART_UNITS // UNITS_PER_USD) <= BIGINT
    assert RECORDS_PER_HOUR * MAX_FEE_CALLS <= BIGINT  # web search calls summed over an hour


def test_a_record_at_the_caps_goes_in_and_out_exactly(db_url: str, ledgers: list[Ledger], tmp_path: Path) -> None:
    rec = at_the_caps(1)
    row = to_row(rec)
    assert (row["cost_carry"], row["cost_units"]) == divmod(MAX_COST_UNITS, CARRY)
    odd = at_the_caps(2, cost_units=MAX_COST_UNITS - 1)
    cheap = full_record(3, cost_units=CARRY - 1)  # the dearest record with no carry: $99,999,999.99...
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    ledger.start()
    ledger.append_many([rec, odd, cheap])
    assert ledger.flush() and ledger.rejected == 0
    assert list(ledger.rows(*EVER)) == [rec, odd, cheap]
    carry, units = divmod(MAX_COST_UNITS, CARRY)
    assert execute(db_url, "SELECT cost_carry, cost_units FROM requests ORDER BY id") == [
        (carry, units), divmod(MAX_COST_UNITS - 1, CARRY), (0, CARRY - 1)]


def test_sums_at_the_caps_are_exact_integers_in_batches_rollups_reports_and_the_month(
        db_url: str, ledgers: list[Ledger]) -> None:
    ledger = Ledger(db_url, batch_size=700)
    ledgers.append(ledger)
    ledger.start()
    hour = datetime(2026, 11, 3, 14, tzinfo=UTC)
    n = 3000
    # One hour and key, the dearest records the caps allow plus some with odd units to carry.
    records = [at_the_caps(i, start=hour + timedelta(milliseconds=i),
                           cost_units=MAX_COST_UNITS - (i % 7) * 999_999_999) for i in range(n)]
    ledger.append_many(records)
    assert ledger.flush(60) and ledger.rejected == 0
    total = sum(r.cost_units or 0 for r in records)
    assert total > 2**64  # a single BIGINT sum would have failed (or gone REAL) long before this
    month = (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))
    [rolled] = ledger.store.hourly_rows(*month, None)  # from the rollup
    assert rolled.requests == n and rolled.cost_units == total and type(rolled.cost_units) is int
    assert rolled.input_tokens == rolled.cache_write_1h_tokens == n * MAX_TOKENS
    assert rolled.web_search_calls == n * MAX_FEE_CALLS and rolled.provider_costed == n
    assert rolled.fee_units == rolled.provider_cost_units == n * MAX_PART_UNITS  # beyond BIGINT too
    assert n * MAX_PART_UNITS > BIGINT
    assert ledger.store.hourly(*month, None) == [rolled.as_tuple()]  # the positional shape, for older callers
    half = (hour - timedelta(minutes=30), hour + timedelta(minutes=90))  # summed from the requests
    assert sum(r.cost_units for r in ledger.store.hourly_rows(*half, None)) == total
    assert ledger.month_to_date_cost(hour) == {"search-team": total}
    assert execute(db_url, "SELECT cost_units < 10000000000 AND fee_units < 10000000000 "
                           "AND provider_cost_units < 10000000000 FROM hourly_rollup") in ([(1,)], [(True,)])
    if not is_postgresql(db_url):  # never a REAL, whatever the volume
        assert execute(db_url, "SELECT typeof(cost_usd), typeof(cost_units), typeof(fee_usd), "
                               "typeof(provider_cost_usd) FROM hourly_rollup") == [("integer",) * 4]


def test_a_rollup_at_the_bound_still_adds_exactly(db_url: str, ledgers: list[Ledger]) -> None:
    """The hour and key already hold RECORDS_PER_HOUR - 1 records at the caps; one more is exact."""
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    ledger.start()
    ledger.append(at_the_caps(0))
    assert ledger.flush()
    usd = (RECORDS_PER_HOUR - 1) * (MAX_COST_UNITS // UNITS_PER_USD)
    execute(db_url, f"UPDATE hourly_rollup SET cost_usd = {usd}, cost_units = {UNITS_PER_USD - 1}, "
                    f"requests = {RECORDS_PER_HOUR - 1}")
    ledger.append(at_the_caps(1, start=T0 + timedelta(seconds=1), cost_units=MAX_COST_UNITS - 1))
    assert ledger.flush() and ledger.rejected == 0
    [row] = ledger.store.hourly_rows(datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC), None)
    assert row.requests == RECORDS_PER_HOUR
    assert row.cost_units == usd * UNITS_PER_USD + UNITS_PER_USD - 1 + MAX_COST_UNITS - 1


def test_an_inexact_rollup_from_before_005_is_summed_again_exactly(tmp_path: Path) -> None:
    """Before 005 SQLite's `+` turned an hour past 9.2e18 units into a REAL (1.1e+19): the
    migration sums such hours again from their requests, exactly."""
    path = tmp_path / "old.db"
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                "applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)")
    for m in load("sqlite")[:4]:
        con.executescript(m.sql)
        con.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", (m.version, m.name))
    old = [full_record(i, cost_units=5 * 10**18 + i) for i in range(3)]  # each fits BIGINT, their sum not
    # No cost_carry yet (the whole cost in cost_units), nor 007's columns.
    rows = [[{**to_row(r), "cost_units": r.cost_units}[c] for c in BEFORE_005] for r in old]
    con.executemany(f"INSERT INTO requests ({', '.join(BEFORE_005)}) VALUES ({', '.join('?' * len(BEFORE_005))})",
                    rows)
    con.execute("INSERT INTO hourly_rollup SELECT start / 3600000000, model, 0, tier, upstream, tenant, tag, "
                "workload, 1, 3, 0, 0, 0, 0, 0, 0, 0, 1.5000000000000002e19 FROM requests LIMIT 1")
    con.close()
    store = SqliteStore(path)
    assert store.migrate() == len(load("sqlite")) - 4  # 005 and those after it
    [row] = store.hourly_rows(*EVER, None)
    assert row.requests == 3 and row.cost_units == sum(r.cost_units or 0 for r in old) == 15 * 10**18 + 3
