"""The `slo` table: the API's measured time to first token and output tokens/s per request, by
model, tier and input-side band, from a seeded month, checked against percentiles worked out
here from the records themselves (within the histogram's stated error, histograms.ERROR), on
SQLite and PostgreSQL, in every format."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import replace
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from pricing import PriceBook
from proxy.ledger.record import Record
from proxy.ledger.store import open_store
from proxy.ledger.store.histograms import ERROR
from proxy.report import ReportInput, build_report, render
from proxy.settings import SelfHost
from tests.ledger.seeded_load import seeded_month


def records() -> list[Record]:
    out = []
    for i, r in enumerate(seeded_month()):
        if r.tenant == "search":
            r = replace(r, tier="highspeed")  # a second tier
        if i % 17 == 0:
            r = replace(r, usage_source="estimated")  # not the upstream's figures: left out
        out.append(r)
    return out


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    found: str = request.getfixturevalue("pg_url")
    return found


def built(url: str) -> Any:
    store = open_store(url)
    store.migrate()
    writer = store.writer()
    try:
        writer.insert_many(records())
    finally:
        writer.close()
    inp = ReportInput(month="2026-11", tz=ZoneInfo("UTC"), book=PriceBook([]), selfhost=SelfHost(),
                      workload_bounds=(4096, 32768, 131072), now=datetime(2026, 12, 15, tzinfo=UTC))
    return build_report(open_store(url, read_only=True), inp)


def band(r: Record) -> str:
    side = r.input_side_tokens
    return "lt_32k" if side < 32_768 else "32k_128k" if side < 131_072 else "ge_128k"


def rank(values: list[Any], p: int) -> Any:
    ordered = sorted(values)
    return ordered[math.ceil(p * len(ordered) / 100) - 1]


def expected() -> list[dict[str, Any]]:
    groups: dict[tuple[str, str, str], list[Record]] = {}
    start, end = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)
    for r in records():
        if (r.stream and r.usage_source == "upstream" and r.ttft_ms is not None and start <= r.start < end
                and r.endpoint == "chat"):
            groups.setdefault((r.model or "", r.tier or "", band(r)), []).append(r)
    out = []
    for (model, tier, b), rs in sorted(groups.items()):
        rates = [Fraction(r.output_tokens * 1000, r.duration_ms - r.ttft_ms) for r in rs
                 if r.duration_ms > (r.ttft_ms or 0)]
        out.append({"model": model, "tier": tier, "band": b, "requests": len(rs),
                    "ttft_ms_p50": rank([r.ttft_ms for r in rs], 50), "ttft_ms_p95": rank([r.ttft_ms for r in rs], 95),
                    "output_tokens_per_s_p50": math.floor(rank(rates, 50) * 100) / 100 if rates else None,
                    "output_tokens_per_s_p95": math.floor(rank(rates, 95) * 100) / 100 if rates else None,
                    "output_timed_requests": len(rates)})
    return out


def test_slo_is_the_records_own_percentiles_per_model_tier_and_band(url: str) -> None:
    r = built(url)
    got = json.loads(render(r, "json"))["slo"]
    want = expected()
    figures = ("ttft_ms_p50", "ttft_ms_p95", "output_tokens_per_s_p50", "output_tokens_per_s_p95")
    assert [{k: v for k, v in x.items() if k not in figures} for x in got] == [
        {k: v for k, v in x.items() if k not in figures} for x in want]
    for g, w in zip(got, want, strict=True):
        for k in figures:
            # A figure is its bucket's (within ERROR of the exact one); tokens/s are kept in hundredths.
            assert (g[k] is None) == (w[k] is None)
            if w[k] is not None:
                assert abs(g[k] - w[k]) <= ERROR * w[k] + (0.01 if k.startswith("output") else 0), (k, g, w)
    assert {x["band"] for x in got} == {"lt_32k", "32k_128k", "ge_128k"}
    assert {x["tier"] for x in got} == {"standard", "highspeed"}
    rows = [x for x in csv.DictReader(io.StringIO(render(r, "csv"))) if x["section"] == "slo"]
    assert [(x["band"], x["requests"]) for x in rows] == [(x["band"], str(x["requests"])) for x in want]
    assert "## The service level to match" in render(r, "md")
    assert 'data-section="slo"' in render(r, "html")
