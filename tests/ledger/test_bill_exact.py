"""Version 2 of the record in the ledger (migration 007): 1-hour cache writes, web search calls,
fees, the band and the provider's own cost are stored, rolled up per hour with the band in the
key, read back by the report; an existing ledger migrates in place with its old rows at 0; and
the speed table the report reads from the requests."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from proxy.ledger import Ledger
from proxy.ledger.migrations import load
from proxy.ledger.record import Record
from proxy.ledger.store import COLUMNS, HourlyRow, RecordRefused, SpeedRow, is_postgresql, open_store, sqlite_path
from proxy.ledger.store.histograms import ERROR
from proxy.ledger.store.rows import HOUR_US, MAX_PART_UNITS, to_micros, to_row
from proxy.ledger.store.sql import HOURLY_SQL
from tests.ledger.helpers import AGGREGATED_COLUMNS, BUDGET_COLUMNS, EVER, T0, V2_COLUMNS, full_record

MONTH = (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))
BEFORE_007 = 6
MIGRATIONS_TABLE = ("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                    "applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)")
# A request row before 007.
OLD_COLUMNS = tuple(c for c in COLUMNS if c not in V2_COLUMNS + BUDGET_COLUMNS + AGGREGATED_COLUMNS)


def execute(url: str, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    if is_postgresql(url):
        with psycopg.connect(url, autocommit=True) as pg:
            cur = pg.execute(sql.replace("?", "%s").encode(), params) if params else pg.execute(sql.encode())
            return cur.fetchall() if cur.description else []
    con = sqlite3.connect(sqlite_path(url), isolation_level=None)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def ledger_before_007(url: str, records: list[Record]) -> None:
    """A ledger as the llmmeter before migration 007 left it, holding `records` (inserted as its
    writer did: on PostgreSQL the rollup trigger counts them; on SQLite the batch's upserts)."""
    dialect = "postgresql" if is_postgresql(url) else "sqlite"
    if dialect == "sqlite":
        sqlite_path(url).parent.mkdir(parents=True, exist_ok=True)
    execute(url, MIGRATIONS_TABLE)
    for m in load(dialect)[:BEFORE_007]:
        if dialect == "sqlite":
            con = sqlite3.connect(sqlite_path(url), isolation_level=None)
            con.executescript(m.sql)
            con.close()
        else:
            execute(url, m.sql)
        execute(url, "INSERT INTO schema_migrations (version, name) VALUES (?, ?)", (m.version, m.name))
    marks = ", ".join("?" * len(OLD_COLUMNS))
    for r in records:
        row = to_row(r)
        execute(url, f"INSERT INTO requests ({', '.join(OLD_COLUMNS)}) VALUES ({marks})",
                tuple(row[c] for c in OLD_COLUMNS))
    if dialect == "sqlite":  # the rollup 006's writer kept in the batch's transaction, summed here once
        execute(url, """
            INSERT INTO hourly_rollup (hour, model, unpriced_model, tier, upstream, tenant, tag, workload, metered,
                requests, input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, reasoning_tokens,
                estimated, unpriced, cost_usd, cost_units)
            SELECT start / 3600000000, model, 0, tier, upstream, tenant, tag, workload, 1, COUNT(*),
                   SUM(input_tokens), SUM(cache_read_tokens), SUM(cache_write_tokens), SUM(output_tokens),
                   SUM(reasoning_tokens), COUNT(*), 0, SUM(cost_units) / 10000000000, SUM(cost_units) % 10000000000
            FROM requests GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9""")


def scanned(url: str) -> list[tuple[object, ...]]:
    """HOURLY_SQL straight over the requests: what the rollup must hold."""
    where = "start >= ? AND start < ?"
    params = (to_micros(MONTH[0]), to_micros(MONTH[1]))
    if is_postgresql(url):
        with psycopg.connect(url, row_factory=psycopg.rows.dict_row) as pg:
            rows = pg.execute(HOURLY_SQL.format(where=where.replace("?", "%s")).encode(), params).fetchall()
    else:
        con = sqlite3.connect(sqlite_path(url))
        con.row_factory = sqlite3.Row
        try:
            rows = con.execute(HOURLY_SQL.format(where=where), params).fetchall()
        finally:
            con.close()
    return sorted(HourlyRow.from_sums(r).as_tuple() for r in rows)


def test_new_fields_round_trip_and_are_summed_per_band(db_url: str, ledgers: list[Ledger]) -> None:
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    ledger.start()
    hour = datetime(2026, 11, 3, 14, tzinfo=UTC)
    base = dict(tenant="a", tag=None, model="claude-sonnet-4.5", tier="standard", workload="long")
    records = [
        # Below every band: two records, one with a provider cost, one without.
        full_record(1, start=hour, price_band=0, cache_write_1h_tokens=4000, web_search_calls=3,
                    fee_units=300_000_000, provider_cost_units=12_345, cost_units=10**10 + 5, **base),
        full_record(2, start=hour + timedelta(minutes=1), price_band=0, cache_write_1h_tokens=1, web_search_calls=0,
                    fee_units=0, provider_cost_units=None, cost_units=7, **base),
        # Above 200,000 input-side tokens: a row of its own.
        full_record(3, start=hour + timedelta(minutes=2), price_band=200_000, cache_write_1h_tokens=0,
                    web_search_calls=2, fee_units=9_999_999_999, provider_cost_units=9_999_999_999,
                    cost_units=20_000_000_000, **base),
        full_record(4, start=hour + timedelta(minutes=3), price_band=200_000, cache_write_1h_tokens=10,
                    web_search_calls=1, fee_units=1, provider_cost_units=1, cost_units=1, **base),
        # Unpriced: no band, no fee; counted at band 0.
        full_record(5, start=hour + timedelta(minutes=4), price_band=None, fee_units=None, cost_units=None,
                    price_model=None, price_tier=None, price_effective_from=None, provider_cost_units=None,
                    cache_write_1h_tokens=5, web_search_calls=4, **base),
    ]
    ledger.append_many(records)
    ledger.append(full_record(3, start=hour + timedelta(minutes=2), **base))  # a duplicate: counted once
    assert ledger.flush() and ledger.rejected == 0
    assert list(ledger.rows(*EVER)) == records
    rows = {r.price_band: r for r in ledger.store.hourly_rows(*MONTH, None)}  # from the rollup
    assert set(rows) == {0, 200_000}
    low, high = rows[0], rows[200_000]
    assert (low.requests, low.cache_write_1h_tokens, low.web_search_calls) == (3, 4006, 7)
    assert (low.fee_units, low.provider_cost_units, low.provider_costed) == (300_000_000, 12_345, 1)
    assert (low.cost_units, low.unpriced) == (10**10 + 12, 1)
    assert (high.requests, high.cache_write_1h_tokens, high.web_search_calls) == (2, 10, 3)
    # 9,999,999,999 + 1 units: the rest carried into a whole dollar, exactly.
    assert (high.fee_units, high.provider_cost_units, high.provider_costed) == (10**10, 10**10, 2)
    assert execute(db_url, "SELECT fee_usd, fee_units, provider_cost_usd, provider_cost_units FROM hourly_rollup "
                           "WHERE price_band = 200000") == [(1, 0, 1, 0)]
    assert sorted(ledger.store.hourly(*MONTH, None)) == scanned(db_url)
    # A range off whole hours sums the same fields from the requests.
    partial = ledger.store.hourly_rows(hour + timedelta(seconds=30), hour + timedelta(minutes=30), None)
    # Records 2 and 5 at band 0 (0 + 4 calls), 3 and 4 above the band (2 + 1 calls); record 1 is before it.
    assert {r.price_band: (r.requests, r.web_search_calls, r.provider_costed) for r in partial} == {
        0: (2, 4, 0), 200_000: (2, 3, 2)}


def test_the_input_side_histogram_counts_one_hour_writes(db_url: str, ledgers: list[Ledger]) -> None:
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    ledger.start()
    # 1 + 0 + 0 + 99 = 100 input-side tokens: the median is 100, not 1.
    ledger.append_many([full_record(i, input_tokens=1, cache_read_tokens=0, cache_write_tokens=0,
                                    cache_write_1h_tokens=99) for i in range(3)])
    assert ledger.flush()
    assert execute(db_url, "SELECT bucket, requests FROM size_histogram WHERE span = 1") == [(99, 3)]
    assert ledger.store.input_side_percentiles(*EVER, None, (50,)) == {"search-team": [100]}


def test_an_existing_ledger_migrates_in_place_and_old_rows_read_0(db_url: str, ledgers: list[Ledger]) -> None:
    hour = datetime(2026, 11, 3, 14, tzinfo=UTC)
    old = [full_record(i, start=hour + timedelta(minutes=i), tenant="a", tag="t", workload="short") for i in range(4)]
    ledger_before_007(db_url, old)
    before = execute(db_url, "SELECT requests, input_tokens, cost_usd, cost_units FROM hourly_rollup")
    assert before and before[0][0] == 4
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    assert ledger.start() == 0  # migrated: 007 only
    assert [int(str(v)) for (v,) in execute(db_url, "SELECT version FROM schema_migrations ORDER BY version")] == \
        [m.version for m in load()]
    back = list(ledger.rows(*EVER))
    assert [r.id for r in back] == [r.id for r in old]
    for r in back:
        assert (r.cache_write_1h_tokens, r.web_search_calls) == (0, 0)
        assert (r.price_band, r.fee_units, r.provider_cost_units) == (None, None, None)
    [row] = ledger.store.hourly_rows(*MONTH, None)
    assert (row.requests, row.price_band, row.cache_write_1h_tokens, row.web_search_calls, row.fee_units,
            row.provider_cost_units, row.provider_costed) == (4, 0, 0, 0, 0, 0, 0)
    assert row.cost_units == sum(r.cost_units or 0 for r in old)
    assert execute(db_url, "SELECT requests, input_tokens, cost_usd, cost_units FROM hourly_rollup") == before
    # New records after the upgrade: same key at band 0 adds to the old row; band 200,000 is a row of its own.
    new = [full_record(10, start=hour + timedelta(minutes=10), tenant="a", tag="t", workload="short", price_band=0),
           full_record(11, start=hour + timedelta(minutes=11), tenant="a", tag="t", workload="short",
                       price_band=200_000)]
    ledger.append_many(new)
    assert ledger.flush() and ledger.rejected == 0
    rows = {r.price_band: r for r in ledger.store.hourly_rows(*MONTH, None)}
    assert (rows[0].requests, rows[0].web_search_calls, rows[0].provider_costed) == (5, 3, 1)
    assert (rows[200_000].requests, rows[200_000].cache_write_1h_tokens) == (1, 7)
    assert sorted(ledger.store.hourly(*MONTH, None)) == scanned(db_url)
    pk = execute(db_url, "SELECT COUNT(*) FROM hourly_rollup")
    assert pk == [(2,)]


@pytest.mark.parametrize("field, value", [
    ("cache_write_1h_tokens", -1), ("cache_write_1h_tokens", 10**9 + 1), ("cache_write_1h_tokens", 1.0),
    ("web_search_calls", 100_001), ("web_search_calls", -1), ("price_band", -1), ("price_band", 2**63),
    ("fee_units", MAX_PART_UNITS + 1), ("fee_units", -1), ("provider_cost_units", MAX_PART_UNITS + 1),
    ("provider_cost_units", "1"),
])
def test_values_beyond_the_bounds_are_refused(field: str, value: object) -> None:
    with pytest.raises(RecordRefused, match="record 'req-00000001'"):
        to_row(full_record(1, **{field: value}))
    to_row(full_record(1, **{field: 0 if field != "provider_cost_units" else MAX_PART_UNITS}))


def timed(i: int, model: str, tier: str, ttft: int | None, duration: int, output: int, **over: object) -> Record:
    fields: dict[str, object] = dict(start=T0 + timedelta(seconds=i), model=model, tier=tier, stream=True,
                                     usage_source="upstream", ttft_ms=ttft, duration_ms=duration,
                                     output_tokens=output)
    fields.update(over)
    return full_record(i, **fields)


def near(got: list[SpeedRow], exact: list[SpeedRow]) -> None:
    """Each figure its histogram bucket's (migration 015): within the stated error of the exact one."""
    assert [(x.model, x.tier, x.requests) for x in got] == [(x.model, x.tier, x.requests) for x in exact]
    for g, w in zip(got, exact, strict=True):
        for a, b in ((g.output_tokens_per_s_p50, w.output_tokens_per_s_p50), (g.ttft_ms_p50, w.ttft_ms_p50),
                     (g.ttft_ms_p95, w.ttft_ms_p95)):
            assert abs(a - b) <= ERROR * b, (g, w)


def test_speed_per_model_and_tier(db_url: str, ledgers: list[Ledger]) -> None:
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    ledger.start()
    records = [
        # kimi highspeed: 1,000 output tokens over (1,200 - 200) ms = 1,000 tokens/s; 500 over 1 s = 500;
        # 300 over 0.9 s = 333.33...; 100 over 3 s = 33.33... Median (nearest rank, 2nd of 4) = 333.33.
        timed(1, "kimi-k3.1-pro", "highspeed", 200, 1200, 1000),
        timed(2, "kimi-k3.1-pro", "highspeed", 100, 1100, 500),
        timed(3, "kimi-k3.1-pro", "highspeed", 300, 1200, 300),
        timed(4, "kimi-k3.1-pro", "highspeed", 400, 3400, 100),
        # Counted for ttft, not for tokens/s: no time after the first token.
        timed(5, "kimi-k3.1-pro", "highspeed", 900, 900, 10),
        # standard: one request, 50 tokens over 2 s = 25 tokens/s.
        timed(6, "kimi-k3.1-pro", "standard", 1000, 3000, 50),
        # A model whose only request never ran past its first token: rate 0.0.
        timed(7, "gpt-5", "flex", 50, 40, 5),
        # Not counted: not streamed, estimated usage, no ttft, not a metered endpoint, outside the range.
        timed(8, "kimi-k3.1-pro", "highspeed", 1, 1001, 10**6, stream=False),
        timed(9, "kimi-k3.1-pro", "highspeed", 1, 1001, 10**6, usage_source="estimated"),
        timed(10, "kimi-k3.1-pro", "highspeed", None, 1001, 10**6),
        timed(11, "kimi-k3.1-pro", "highspeed", 1, 1001, 10**6, endpoint="other"),
        timed(12, "kimi-k3.1-pro", "highspeed", 1, 1001, 10**6, start=T0 + timedelta(days=40)),
        # Another tenant.
        timed(13, "kimi-k3.1-pro", "standard", 2000, 4000, 100, tenant="b"),
    ]
    ledger.append_many(records)
    assert ledger.flush()
    lo, hi = to_micros(MONTH[0]), to_micros(MONTH[1])
    got = ledger.store.speed(lo, hi)
    exact = [
        SpeedRow("gpt-5", "flex", 1, 0.0, 50, 50),  # below 64: exact
        # ttft 100, 200, 300, 400, 900: p50 = 3rd = 300, p95 = 5th = 900.
        SpeedRow("kimi-k3.1-pro", "highspeed", 5, 333.33, 300, 900),
        # 25 tokens/s and 100 over 2 s = 50 tokens/s: the lower middle; ttft 1000, 2000.
        SpeedRow("kimi-k3.1-pro", "standard", 2, 25.0, 1000, 2000),
    ]
    near(got, exact)
    near(ledger.store.speed(MONTH[0], MONTH[1], "b"), [SpeedRow("kimi-k3.1-pro", "standard", 1, 50.0, 2000, 2000)])
    assert ledger.store.speed(lo, lo + HOUR_US) == []
    reader = open_store(db_url, read_only=True)
    assert reader.speed(lo, hi) == got


def test_batch_records_are_billed_rows_in_the_rollup(db_url: str, ledgers: list[Ledger]) -> None:
    # A batch result is as metered as a chat request: it must reach by_model, by_tag and by_band,
    # and an unpriced one must count as unpriced, on both databases (the PostgreSQL trigger
    # names the endpoints itself).
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    ledger.start()
    hour = datetime(2026, 11, 4, 9, tzinfo=UTC)
    base = dict(tenant="a", tag="nightly", model="gpt-5.1", tier="batch", workload="short", endpoint="batch")
    ledger.append_many([
        full_record(1, start=hour, cost_units=625, **base),
        full_record(2, start=hour, cost_units=None, fee_units=None, price_band=None, price_model=None,
                    price_tier=None, price_effective_from=None, **base),
    ])
    assert ledger.flush() and ledger.rejected == 0
    rows = ledger.store.hourly_rows(*MONTH, None)
    assert all(r.metered for r in rows)
    totals = (sum(r.requests for r in rows), sum(r.unpriced for r in rows), sum(r.cost_units for r in rows))
    assert totals == (2, 1, 625)
    assert sorted(ledger.store.hourly(*MONTH, None)) == scanned(db_url)
