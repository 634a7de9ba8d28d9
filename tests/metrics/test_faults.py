"""Metering faults are counted, in process: Metrics on a fresh registry, as client_python's
own tests do, and read back with registry.get_sample_value."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from pricing import PriceBook, default_tables_dir, load_dir
from proxy.metrics.metrics import Metrics
from proxy.protocol.names import FAULT_KINDS
from proxy.settings import Settings
from tests.ledger.helpers import full_record


@pytest.fixture
def metrics() -> tuple[Metrics, CollectorRegistry]:
    registry = CollectorRegistry()
    book = PriceBook(load_dir(default_tables_dir()), {})
    return Metrics(Settings(), book, registry), registry


def faults(registry: CollectorRegistry, kind: str) -> float | None:
    return registry.get_sample_value("llmmeter_metering_faults_total", {"kind": kind})


def test_every_kind_is_exported_at_zero(metrics: tuple[Metrics, CollectorRegistry]) -> None:
    _, registry = metrics
    assert {kind: faults(registry, kind) for kind in FAULT_KINDS} == dict.fromkeys(FAULT_KINDS, 0.0)


def test_fault_flags_are_counted_and_other_flags_are_not(metrics: tuple[Metrics, CollectorRegistry]) -> None:
    m, registry = metrics
    m.observe(full_record(1, flags=["decode_corrupt", "no_usage"]), None, 0.001)
    m.observe(full_record(2, flags=["decode_corrupt", "pricing_failed", "tier_fallback"]), None, 0.001)
    m.observe(full_record(3, flags=[]), None, 0.001)
    assert faults(registry, "decode_corrupt") == 2
    assert faults(registry, "pricing_failed") == 1
    assert faults(registry, "no_usage") is None and faults(registry, "tier_fallback") is None
