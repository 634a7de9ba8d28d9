"""store.speed finds its nearest-rank percentiles in migration 015's histogram: within the
stated bucket error (histograms.ERROR) of sorting every request's value in Python, ties and
even counts included, and exact below 64, on SQLite and PostgreSQL."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from proxy.ledger import Ledger
from proxy.ledger.record import Record
from proxy.ledger.store import SpeedRow
from proxy.ledger.store.histograms import ERROR
from tests.ledger.helpers import full_record

MONTH = (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))


def nearest_rank(values: list[int], p: int) -> int:
    ordered = sorted(values)
    return ordered[(len(ordered) * p + 99) // 100 - 1]


def expected(records: list[Record], tenant: str | None) -> list[SpeedRow]:
    groups: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        if (r.stream and r.usage_source == "upstream" and r.ttft_ms is not None and r.endpoint == "chat"
                and (tenant is None or r.tenant == tenant) and MONTH[0] <= r.start < MONTH[1]):
            groups.setdefault((r.model or r.model_requested or "", r.tier or ""), []).append(r)
    out = []
    for (model, tier), rs in sorted(groups.items()):
        ttft = [r.ttft_ms for r in rs if r.ttft_ms is not None]
        rates = [r.output_tokens * 100_000 // (r.duration_ms - r.ttft_ms) for r in rs
                 if r.ttft_ms is not None and r.duration_ms > r.ttft_ms]
        out.append(SpeedRow(model, tier, len(rs), nearest_rank(rates, 50) / 100 if rates else 0.0,
                            nearest_rank(ttft, 50), nearest_rank(ttft, 95)))
    return out


def close(got: int, exact: int) -> None:
    assert abs(got - exact) <= ERROR * exact, (got, exact)


def test_speed_percentiles_are_within_the_bucket_error_of_sorting_every_request(db_url: str,
                                                                              ledgers: list[Ledger]) -> None:
    rng = random.Random(11)
    records = []
    for i in range(2000):
        ttft = rng.choice((None, rng.randrange(50, 400), rng.choice((100, 200, 300))))  # many ties
        duration = rng.randrange(1000) if ttft is None else ttft + rng.choice((0, -5, rng.randrange(1, 5000)))
        records.append(full_record(
            i, start=datetime(2026, 10, 31, 20, tzinfo=UTC) + timedelta(seconds=rng.randrange(31 * 86400)),
            tenant=rng.choice(("a", "b")), model=rng.choice(("m1", "m2", None)), model_requested="asked",
            tier=rng.choice(("standard", "highspeed", None)), stream=rng.random() < 0.8,
            usage_source=rng.choice(("upstream", "upstream", "estimated")), ttft_ms=ttft, duration_ms=duration,
            output_tokens=rng.randrange(1, 10**6), endpoint=rng.choice(("chat", "chat", "models"))))
    # One model and tier with a single timed request, one with none past its first token.
    records.append(full_record(5000, model="solo", ttft_ms=10, duration_ms=20, output_tokens=7,
                               usage_source="upstream"))
    records.append(full_record(5001, model="stuck", ttft_ms=10, duration_ms=10, usage_source="upstream"))
    ledger = Ledger(db_url, batch_size=211)
    ledgers.append(ledger)
    ledger.start()
    ledger.append_many(records)
    assert ledger.flush(60) and ledger.rejected == 0
    for tenant in (None, "a"):
        got = ledger.store.speed(*MONTH, tenant)
        want = expected(records, tenant)
        assert [(x.model, x.tier, x.requests) for x in got] == [(x.model, x.tier, x.requests) for x in want]
        for g, w in zip(got, want, strict=True):
            close(g.ttft_ms_p50, w.ttft_ms_p50)
            close(g.ttft_ms_p95, w.ttft_ms_p95)
            close(round(g.output_tokens_per_s_p50 * 100), round(w.output_tokens_per_s_p50 * 100))
        assert all(type(x.requests) is int and type(x.ttft_ms_p95) is int for x in got)
    solo, stuck = [x for x in ledger.store.speed(*MONTH) if x.model in ("solo", "stuck")]
    close(round(solo.output_tokens_per_s_p50 * 100), 70_000)  # 7 tokens in 10 ms
    assert (solo.tier, solo.requests, solo.ttft_ms_p50, solo.ttft_ms_p95) == ("highspeed", 1, 10, 10)
    assert stuck == SpeedRow("stuck", "highspeed", 1, 0.0, 10, 10)  # below 64: exact
