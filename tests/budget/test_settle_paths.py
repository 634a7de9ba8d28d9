"""A reservation is settled once, whatever path its record takes: set aside, or repriced later."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import orjson

from pricing import Price, PriceBook
from proxy.ledger.deadletter import DeadLetters
from proxy.ledger.record import Record
from proxy.ledger.reprice import reprice_record

T0 = datetime(2026, 1, 1, tzinfo=UTC)
AT = datetime(2026, 11, 10, 12, tzinfo=UTC)


def record(**kw: object) -> Record:
    fields: dict[str, object] = dict(id="r1", start=AT, tenant="t", endpoint="chat", stream=False, code=200,
                                     outcome="ok", model_requested="m", input_tokens=1000, output_tokens=0,
                                     reserved_units=1000, budget_leases="host-1.abc")
    fields.update(kw)
    return Record(**fields)  # type: ignore[arg-type]


def test_a_set_aside_record_names_no_lease_so_a_retry_settles_nothing_again(tmp_path: Path) -> None:
    dead = DeadLetters(tmp_path)
    dead.add([(record(), "refused")])
    [line] = [ln for f in tmp_path.iterdir() for ln in f.read_bytes().splitlines()]
    kept = orjson.loads(line)
    assert kept["budget_leases"] is None and kept["reserved_units"] == 1000 and kept["id"] == "r1"


def test_a_repriced_record_is_flagged_when_its_new_cost_exceeds_its_reservation() -> None:
    # Unpriced when written; $1 per million input tokens now: 1,000 tokens cost 10,000,000 units,
    # beyond the 1,000 it reserved.
    book = PriceBook([Price(model="m", tier="standard", effective_from=T0, input=Decimal(1), output=Decimal(1),
                            cache_read=Decimal(1), cache_write=Decimal(1), source="t", match=("m",))])
    new = reprice_record(book, record())
    assert new is not None and new.cost_units == 10_000_000 and "over_reservation" in new.flags
    within = reprice_record(book, record(reserved_units=10**9))
    assert within is not None and "over_reservation" not in within.flags


def test_a_repriced_record_whose_usage_was_unseen_still_costs_its_reservation() -> None:
    # A client left before the usage: 1,000 estimated tokens cost 10,000,000 units now, below the
    # 10^9 it reserved; a repricing must not lower what its budget counts below that worst case.
    book = PriceBook([Price(model="m", tier="standard", effective_from=T0, input=Decimal(1), output=Decimal(1),
                            cache_read=Decimal(1), cache_write=Decimal(1), source="t", match=("m",))])
    left = record(reserved_units=10**9, usage_source="estimated", outcome="client_closed")
    new = reprice_record(book, left)
    assert new is not None and new.cost_units == 10**9
    assert "usage_unseen" in new.flags and "over_reservation" not in new.flags
    seen = reprice_record(book, record(reserved_units=10**9))
    assert seen is not None and seen.cost_units == 10_000_000 and "usage_unseen" not in seen.flags
