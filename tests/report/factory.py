"""A Report built by hand: the launch coverage's worked example, small enough to check by eye."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from typing import Any

from proxy.report.model import (
    Assumption,
    BandRow,
    Day,
    Forecast,
    Hour,
    ModelRow,
    Report,
    SelfHosting,
    SpeedRow,
    TagRow,
    TagWorkloadRow,
    TenantRow,
    Totals,
    Usage,
    WhatIf,
    WorkloadRow,
)

USD = 10**10  # units in a dollar
RAG = Usage(1, 100_000_000, 0, 0, 20_000_000, 0, 400 * USD)
CACHED = Usage(1, 30_000_000, 70_000_000, 0, 20_000_000, 0, 274 * USD)
BOTH = Usage(2, 130_000_000, 70_000_000, 0, 40_000_000, 0, 674 * USD)


def worked_report(**over: Any) -> Report:
    days = tuple(Day(date(2026, 11, 1) + timedelta(days=i), BOTH if i == 2 else Usage(),
                     (("kimi-k3.1-pro/standard", 674 * USD),) if i == 2 else ()) for i in range(30))
    hours = tuple(Hour(h, 2 if h == 14 else 0, 240_000_000 if h == 14 else 0) for h in range(24))
    r = Report(
        month="2026-11", timezone="UTC", tenant=None, generated_at=datetime(2026, 12, 1, 8, tzinfo=UTC),
        totals=Totals(BOTH, 0, 0), cache_hit_rate=0.35, estimated_share=0.0, unpriced_models=(),
        by_model=(ModelRow("kimi-k3.1-pro", "standard", "default", BOTH, 1.0),),
        by_tenant=(TenantRow("default", BOTH, 1.0, 100_000_000, 100_000_000),),
        by_tag=(TagRow("rag-search", RAG, 400 / 674), TagRow("untagged", CACHED, 274 / 674)),
        by_workload=(WorkloadRow("short", 0, Usage(), 0.0), WorkloadRow("medium", 4096, Usage(), 0.0),
                     WorkloadRow("long", 32768, Usage(), 0.0), WorkloadRow("very_long", 131072, BOTH, 1.0)),
        by_tag_workload=(TagWorkloadRow("rag-search", "very_long", RAG, 400 / 674),
                         TagWorkloadRow("untagged", "very_long", CACHED, 274 / 674)),
        by_band=(BandRow("kimi-k3.1-pro", "standard", 0, BOTH, 1.0),),
        workload_summary="very-long-document requests are 100% of calls and 100% of cost.",
        daily=days, hourly_profile=hours, peak_to_offpeak_ratio=0.0,
        speed=(SpeedRow("kimi-k3.1-pro", "standard", 1, 52.5, 640, 640),),
        forecast=Forecast(True, 674 * USD, 240_000_000, "the month is complete: actual totals"),
        what_if=WhatIf(674 * USD, 1334 * USD, 800 * USD, 674 * USD, 674 * USD), reprice=None,
        self_hosting=SelfHosting(
            assumptions=(Assumption("nodes", "2", "launch coverage"),
                         Assumption("node_capex_usd", "600000", "launch coverage")),
            monthly_cost_units=559_613_333_333_333, api_cost_units=674 * USD, api_tokens=240_000_000,
            breakeven_monthly_tokens=19_927_015_430, volume_multiple_to_breakeven=83.03,
            peak_hour_tokens_per_s=66_666.7, peak_fits=True, utilisation=0.0011,
            summary="At your volume the API costs $674.00."),
    )
    return replace(r, **over)
