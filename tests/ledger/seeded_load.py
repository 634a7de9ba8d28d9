"""A seeded month of traffic with a daytime peak and long-context agent sessions, and the
load per UTC minute worked out from it by a second-by-second simulation: an independent
computation, not the SQL that keeps the ledger's minute table.

Every start, time to first token and duration is a whole number of seconds, so within each
second every load is constant or (the KV cache while decoding) linear: a second's value at
its midpoint is its exact average, and the simulation is exact in fractions.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from fractions import Fraction

from proxy.ledger.record import Record

MONTH_START = datetime(2026, 11, 1, tzinfo=UTC)
MONTH_END = datetime(2026, 12, 1, tzinfo=UTC)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def seeded_month(seed: int = 35) -> list[Record]:
    rng = random.Random(seed)
    out: list[Record] = []

    def add(start: datetime, *, stream: bool, inp: int, cached: int, outp: int, ttft_s: int | None, dur_s: int,
            endpoint: str = "chat", outcome: str = "ok", tenant: str = "app") -> None:
        out.append(Record(id=f"load-{len(out):06d}", start=start, tenant=tenant, endpoint=endpoint, stream=stream,
                          code=200, outcome=outcome, upstream="moonshot", model="kimi-k3.1-pro", tier="standard",
                          input_tokens=inp, cache_read_tokens=cached, output_tokens=outp, duration_ms=dur_s * 1000,
                          ttft_ms=None if ttft_s is None else ttft_s * 1000, cost_units=1000))

    for day in range(30):
        base = MONTH_START + timedelta(days=day)
        # Quiet background all day: about one request every 40 minutes.
        for _ in range(36):
            at = base + timedelta(seconds=rng.randrange(86_400))
            streamed = rng.random() < 0.6
            dur = rng.randrange(2, 40)
            add(at, stream=streamed, inp=rng.randrange(200, 4000), cached=rng.randrange(0, 2000),
                outp=rng.randrange(10, 800), ttft_s=rng.randrange(0, dur) if streamed else None, dur_s=dur,
                tenant=rng.choice(("app", "search")))
        if day % 7 in (5, 6):
            continue
        # Weekday peak, 13:00-16:00 UTC: bursts of chat traffic.
        for _ in range(40):
            at = base + timedelta(hours=13, seconds=rng.randrange(3 * 3600))
            dur = rng.randrange(3, 90)
            add(at, stream=True, inp=rng.randrange(1000, 30_000), cached=rng.randrange(0, 20_000),
                outp=rng.randrange(50, 3000), ttft_s=rng.randrange(1, min(dur, 8) + 1), dur_s=dur)
        # One long-context agent session: calls back to back, the context growing each time.
        at = base + timedelta(hours=14, seconds=rng.randrange(3600))
        context = rng.randrange(100_000, 200_000)
        for _ in range(rng.randrange(4, 9)):
            ttft, dur = rng.randrange(5, 40), rng.randrange(60, 900)
            outp = rng.randrange(500, 8000)
            add(at, stream=True, inp=context // 10, cached=context - context // 10, outp=outp, ttft_s=ttft,
                dur_s=dur, tenant="agents")
            context = min(context + outp + rng.randrange(5000, 60_000), 900_000)
            at += timedelta(seconds=dur + rng.randrange(1, 30))
    # Shapes at the edges: a call that ends with its first token, one with no time at all, a
    # non-streamed one shorter than a second's window, one running into the next month.
    add(MONTH_START + timedelta(days=3, hours=2), stream=True, inp=5000, cached=0, outp=7, ttft_s=12, dur_s=12)
    add(MONTH_START + timedelta(days=4, hours=3, seconds=59), stream=False, inp=900, cached=0, outp=40,
        ttft_s=None, dur_s=0)
    add(MONTH_START + timedelta(days=5, hours=4, seconds=30), stream=False, inp=300, cached=0, outp=30,
        ttft_s=None, dur_s=1)
    add(MONTH_END - timedelta(seconds=30), stream=True, inp=40_000, cached=0, outp=900, ttft_s=10, dur_s=95)
    # Not live load: a batch result, a request llmmeter refused, a model listing.
    add(MONTH_START + timedelta(days=6, hours=14), stream=False, inp=10**6, cached=0, outp=10**5, ttft_s=None,
        dur_s=30, endpoint="batch")
    add(MONTH_START + timedelta(days=6, hours=14), stream=False, inp=10**6, cached=0, outp=0, ttft_s=None,
        dur_s=30, outcome="rejected")
    add(MONTH_START + timedelta(days=6, hours=14), stream=False, inp=10**6, cached=0, outp=0, ttft_s=None,
        dur_s=30, endpoint="models")
    return out


@dataclass
class Minute:
    busy_s: Fraction = Fraction(0)
    prefill: Fraction = Fraction(0)  # tokens
    decode: Fraction = Fraction(0)
    kv_token_s: Fraction = Fraction(0)
    records: int = 0  # how many records touched it (each rounds its share once)
    tenants: set[str] = field(default_factory=set)


def simulate(records: list[Record], tenant: str | None = None) -> dict[int, Minute]:
    """Per UTC minute (minutes since the epoch), second by second."""
    minutes: dict[int, Minute] = defaultdict(Minute)
    for r in records:
        if r.endpoint not in ("chat", "completions", "embeddings", "responses", "messages") or r.outcome == "rejected":
            continue
        if tenant is not None and r.tenant != tenant:
            continue
        s = int((r.start - _EPOCH).total_seconds())
        d = r.duration_ms // 1000
        e = s + d
        fw = min(r.ttft_ms // 1000 if r.stream and r.ttft_ms is not None else 1, d)
        f, ow = s + fw, d - fw
        i, o = r.input_side_tokens, r.output_tokens
        touched = set()
        if fw == 0:
            minutes[s // 60].prefill += i
            touched.add(s // 60)
        if ow == 0:
            minutes[max(s, e - 1) // 60].decode += o
            touched.add(max(s, e - 1) // 60)
        for t in range(s, e):
            m = minutes[t // 60]
            touched.add(t // 60)
            m.busy_s += 1
            if t < f:
                m.prefill += Fraction(i, fw)
            else:
                m.decode += Fraction(o, ow)
            produced = min(max((Fraction(2 * t + 1, 2) - f) / ow, Fraction(0)), Fraction(1)) if ow else Fraction(0)
            m.kv_token_s += i + o * produced
        for minute in touched:
            minutes[minute].records += 1
            minutes[minute].tenants.add(r.tenant)
    return dict(minutes)


def epoch_minute(t: datetime) -> int:
    return int((t - _EPOCH).total_seconds()) // 60
