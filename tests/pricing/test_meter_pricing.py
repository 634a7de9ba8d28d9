"""A pricing failure never reaches the relay: the request is recorded unpriced and flagged."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from decimal import Decimal

from prometheus_client import CollectorRegistry

from pricing import Price, PriceBook
from pricing.calculator import MAX_TOKENS
from proxy.ledger.record import Record
from proxy.metering.estimate.estimator import Estimator
from proxy.metering.meter import PRICING_FAILED, Exchange, Meter
from proxy.metrics.metrics import Metrics
from proxy.protocol.usage import Observed, Usage
from proxy.settings import Settings, Workloads

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Kept:
    def __init__(self) -> None:
        self.records: list[Record] = []

    def append(self, record: Record) -> None:
        self.records.append(record)


def meter_with(input_price: str) -> tuple[Meter, Kept, CollectorRegistry]:
    # Built by hand, past the loader that would refuse such a price: the meter must hold on its own.
    p = Price(model="m", tier="standard", effective_from=T0, input=Decimal(input_price), output=Decimal(1),
              cache_read=Decimal(1), cache_write=Decimal(1), source="t", match=("m",))
    book = PriceBook([p])
    kept, registry = Kept(), CollectorRegistry()
    return Meter(book, Estimator(), Workloads(), kept, Metrics(Settings(), book, registry)), kept, registry


def exchange() -> Exchange:
    ex = Exchange(start=datetime.now(UTC), t0=time.perf_counter(), endpoint="chat", tenant="default", code=200)
    ex.model_requested = "m"
    return ex


def test_a_price_the_calculator_refuses_records_the_request_unpriced_and_flagged() -> None:
    meter, kept, registry = meter_with("1e999999999")  # raised decimal.Overflow mid-request before
    rec = meter.record(exchange(), Observed(model="m"), Usage(10, 0, 0, 5, None), "upstream")
    assert kept.records == [rec]
    assert rec.cost_units is None and PRICING_FAILED in rec.flags and rec.price_model is None
    assert (rec.model, rec.tier, rec.input_tokens, rec.output_tokens) == ("m", "standard", 10, 5)
    assert registry.get_sample_value("llmmeter_unpriced_requests_total", {"model": "m"}) == 1
    assert meter.pricing_failures == 1


def test_a_count_beyond_the_cap_records_the_request_unpriced_and_flagged() -> None:
    meter, kept, _ = meter_with("2")
    rec = meter.record(exchange(), Observed(model="m"), Usage(MAX_TOKENS + 1, 0, 0, 0, None), "estimated")
    assert kept.records == [rec] and rec.cost_units is None and rec.flags == [PRICING_FAILED]
    fine = meter.record(exchange(), Observed(model="m"), Usage(MAX_TOKENS, 0, 0, 0, None), "upstream")
    assert fine.cost_units == MAX_TOKENS * 2 * 10**4 and fine.flags == []
