"""Time to first token has buckets where LLM first tokens fall, so a p95 read from them is close."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from pricing import PriceBook
from proxy.metrics.metrics import Metrics
from proxy.settings import Settings
from tests.ledger.helpers import full_record


def test_ttft_buckets_split_the_first_two_seconds() -> None:
    registry = CollectorRegistry()
    m = Metrics(Settings(), PriceBook([]), registry)
    for i in range(20):
        m.observe(full_record(i, ttft_ms=302, flags=[]), None, 0.001)
    labels = {"model": "other", "tier": "highspeed"}

    def bucket(le: str) -> float | None:
        return registry.get_sample_value("llmmeter_time_to_first_token_seconds_bucket", {**labels, "le": le})

    for le in ("0.3", "0.4", "0.75", "1.5", "2.0"):
        assert bucket(le) is not None, le
    # A true 0.302 s lies in (0.3, 0.4]: histogram_quantile's p95 is at most 0.4 s, not 0.49 s.
    assert (bucket("0.3"), bucket("0.4")) == (0.0, 20.0)
