"""store.grouped_rows: the rollup grouped by the database equals the hourly rows added up one by
one, and its totals equal the requests' own sums, on SQLite and PostgreSQL alike."""

from __future__ import annotations

import random
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pricing.calculator import MAX_COST_UNITS, UNITS_PER_USD
from proxy.ledger import Ledger
from proxy.ledger.store import HourlyRow
from proxy.report.build import BY_ATTRIBUTION, BY_HOUR
from tests.ledger.helpers import full_record
from tests.ledger.test_money_bounds import RECORDS_PER_HOUR, at_the_caps, execute

MONTH = (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))
KOLKATA = (datetime(2026, 10, 31, 18, 30, tzinfo=UTC), datetime(2026, 11, 30, 18, 30, tzinfo=UTC))  # partial hours
KEYS = ("hour", "model", "unpriced_model", "tier", "upstream", "tenant", "tag", "workload", "metered", "price_band")
SUMS = tuple(f.name for f in fields(HourlyRow) if f.name not in KEYS)


def varied(n: int) -> list[Any]:
    """Records over the month and its edges, every key varied, some unpriced, some not metered."""
    rng = random.Random(7)
    out = []
    for i in range(n):
        start = datetime(2026, 10, 31, 17, tzinfo=UTC) + timedelta(seconds=rng.randrange(31 * 86400 + 7200))
        unpriced = rng.random() < 0.1
        out.append(full_record(
            i, start=start, tenant=rng.choice(("a", "b", "c")), tag=rng.choice(("x", "y", None)),
            workload=rng.choice(("short", "medium", "long", "very_long")), tier=rng.choice(("standard", "highspeed")),
            model=None if unpriced else rng.choice(("m1", "m2")), model_requested="asked",
            endpoint=rng.choice(("chat", "chat", "embeddings", "models")), upstream=rng.choice(("u1", "u2")),
            price_band=rng.choice((None, 0, 128000)), input_tokens=rng.randrange(10**6),
            cache_read_tokens=rng.randrange(10**5), output_tokens=rng.randrange(10**4),
            cost_units=None if unpriced else rng.randrange(MAX_COST_UNITS // 10**6),
            fee_units=rng.choice((None, rng.randrange(10**12))),
            provider_cost_units=rng.choice((None, rng.randrange(10**14))),
            usage_source=rng.choice(("upstream", "estimated"))))
    return out


def added_up(rows: list[HourlyRow], keys: tuple[str, ...]) -> dict[tuple[Any, ...], dict[str, int]]:
    """The reference: hourly rows added one by one per value of `keys`."""
    out: dict[tuple[Any, ...], dict[str, int]] = {}
    for row in rows:
        sums = out.setdefault(tuple(getattr(row, k) for k in keys), dict.fromkeys(SUMS, 0))
        for name in SUMS:
            sums[name] += getattr(row, name)
    return out


@pytest.mark.parametrize("span", [MONTH, KOLKATA], ids=["whole-hours", "partial-hours"])
def test_grouped_rows_equal_the_hourly_rows_added_up_and_the_requests_sums(
        db_url: str, ledgers: list[Ledger], span: tuple[datetime, datetime]) -> None:
    ledger = Ledger(db_url, batch_size=97)
    ledgers.append(ledger)
    ledger.start()
    records = varied(1500)
    ledger.append_many(records)
    assert ledger.flush(60) and ledger.rejected == 0
    store = ledger.store
    inside = [r for r in records if span[0] <= r.start < span[1]]
    for tenant in (None, "b"):
        hourly = store.hourly_rows(*span, tenant)
        mine = [r for r in inside if tenant is None or r.tenant == tenant]
        for keys in (BY_HOUR, BY_ATTRIBUTION, ("tenant",), KEYS):
            grouped = store.grouped_rows(*span, tenant, keys)
            got = {tuple(getattr(row, k) for k in keys): {n: getattr(row, n) for n in SUMS} for row in grouped}
            assert len(got) == len(grouped)  # one row per value of the keys
            assert got == added_up(hourly, keys)
            assert all(type(row.cost_units) is int for row in grouped)
            blank = [k for k in KEYS if k not in keys]  # the keys not grouped by read blank
            assert all(not getattr(row, k) for row in grouped for k in blank)
            # And against the requests themselves, summed here.
            assert sum(row.requests for row in grouped) == sum(r.request_count for r in mine)
            assert sum(row.cost_units for row in grouped) == sum(r.cost_units or 0 for r in mine)
            assert sum(row.input_tokens for row in grouped) == sum(r.input_tokens for r in mine)
            assert sum(row.fee_units for row in grouped) == sum(r.fee_units or 0 for r in mine)
            assert sum(row.provider_cost_units for row in grouped) == sum(r.provider_cost_units or 0 for r in mine)
            assert sum(row.provider_costed for row in grouped) == sum(r.provider_cost_units is not None for r in mine)


def test_a_month_of_hours_each_at_the_bound_adds_up_exactly(db_url: str, ledgers: list[Ledger]) -> None:
    """Each hour's rollup may hold sums just under BIGINT; a month of them adds up exactly, where one
    SQL SUM over them would overflow (SQLite raises)."""
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    ledger.start()
    hours = 3
    ledger.append_many([at_the_caps(i, start=datetime(2026, 11, 3, i, tzinfo=UTC)) for i in range(hours)])
    assert ledger.flush() and ledger.rejected == 0
    usd = (RECORDS_PER_HOUR - 1) * (MAX_COST_UNITS // UNITS_PER_USD)
    execute(db_url, f"UPDATE hourly_rollup SET cost_usd = {usd}, cost_units = {UNITS_PER_USD - 1}")
    [row] = ledger.store.grouped_rows(*MONTH, None, ("tenant",))
    assert row.cost_units == hours * (usd * UNITS_PER_USD + UNITS_PER_USD - 1)
    assert row.cost_units == sum(r.cost_units for r in ledger.store.hourly_rows(*MONTH, None))


def test_grouping_by_a_name_that_is_no_key_is_refused(db_url: str, ledgers: list[Ledger]) -> None:
    ledger = Ledger(db_url)
    ledgers.append(ledger)
    ledger.start()
    for keys in ((), ("tenant; DROP TABLE requests",), ("cost_units",)):
        with pytest.raises(ValueError, match="group the rollup by"):
            ledger.store.grouped_rows(*MONTH, None, keys)
