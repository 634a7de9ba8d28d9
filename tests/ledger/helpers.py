"""Records with every field set, a ledger holding some, and a poll helper, for the ledger tests."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

from proxy.ledger.record import Record
from proxy.ledger.store import COLUMNS, open_store

# The request columns migration 007 added: a ledger migrated only to 006 or earlier lacks them.
V2_COLUMNS = ("cache_write_1h_tokens", "web_search_calls", "price_band", "fee_units", "provider_cost_units")
BUDGET_COLUMNS = ("reserved_units", "budget_leases", "budget")  # migration 008
AGGREGATED_COLUMNS = ("request_count",)  # migration 009
# The columns of a ledger before 005 (no cost_carry yet) and before 007.
LATER = V2_COLUMNS + BUDGET_COLUMNS + AGGREGATED_COLUMNS
BEFORE_005 = tuple(c for c in COLUMNS if c != "cost_carry" and c not in LATER)

T0 = datetime(2026, 11, 3, 14, 5, 9, 123456, tzinfo=UTC)
EVER = (datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC))


def full_record(i: int = 0, **over: object) -> Record:
    """A record with no field left at its default."""
    fields: dict[str, object] = dict(
        id=f"req-{i:08d}", start=T0 + timedelta(milliseconds=i), tenant="search-team", endpoint="chat",
        stream=True, code=200, outcome="ok", upstream="moonshot", end_user="user-42",
        model_requested="moonshot/kimi-k3.1-pro", response_model="kimi-k3.1-pro-2026-10", model="kimi-k3.1-pro",
        tier="highspeed", input_tokens=30_000_000 + i, cache_read_tokens=70_000_000, cache_write_tokens=5,
        output_tokens=20_000_000, reasoning_tokens=1234, usage_source="estimated",
        flags=["tier_fallback", "no_usage"], price_model="kimi-k3.1-pro", price_tier="standard",
        price_effective_from=datetime(2026, 10, 23, tzinfo=UTC), cost_units=2_740_000_000_000 + i,
        duration_ms=1500, ttft_ms=210, tag="rag-search", workload="long", upstream_request_id=f"chatcmpl-{i}",
        cache_write_1h_tokens=7, web_search_calls=3, price_band=200_000, fee_units=300_000_000,
        provider_cost_units=2_740_000_000_123, reserved_units=3_000_000_000_000, budget_leases=f"host-1.lease{i}",
        budget="search-team-monthly",
    )
    fields.update(over)
    return Record(**fields)  # type: ignore[arg-type]


def wait_until(cond: Callable[[], bool], timeout: float = 60.0) -> bool:
    """As tests.faults.helpers.wait_until: a generous deadline, returned from as soon as `cond` holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def written(url: str, records: Sequence[Record]) -> str:
    """A migrated ledger at `url` holding `records`, written as the importer writes them; the url."""
    store = open_store(url)
    store.migrate()
    writer = store.writer()
    try:
        writer.insert_many(records)
    finally:
        writer.close()
    return url
