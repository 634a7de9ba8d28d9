"""load_by_minute and nodes in the report, from a seeded month with a daytime peak and
long-context agent sessions, checked against a second-by-second simulation of the same
records (tests/ledger/seeded_load.py), on SQLite and PostgreSQL, in every format."""

from __future__ import annotations

import csv
import functools
import io
import json
import math
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from pricing import PriceBook
from proxy.ledger.store import open_store
from proxy.report import ReportInput, build_report, render
from proxy.settings import NodeProfile, SelfHost
from tests.ledger.helpers import written
from tests.ledger.seeded_load import MONTH_START, epoch_minute, seeded_month, simulate

TZ = ZoneInfo("America/Sao_Paulo")
LOCAL_START = datetime(2026, 11, 1, tzinfo=TZ)
LOCAL_END = datetime(2026, 12, 1, tzinfo=TZ)
# Profiles small enough that the seeded month needs several nodes, each bound by another limit.
TIGHT = (
    NodeProfile("kv-bound", "test", kv_cache_tokens=200_000, prefill_tokens_per_s=10**6, decode_tokens_per_s=10**6,
                rent_usd_per_month=1),
    NodeProfile("prefill-bound", "test", kv_cache_tokens=10**9, prefill_tokens_per_s=3_000,
                decode_tokens_per_s=10**6, rent_usd_per_month=1),
    NodeProfile("decode-bound", "test", kv_cache_tokens=10**9, prefill_tokens_per_s=10**6, decode_tokens_per_s=20,
                rent_usd_per_month=1),
)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    found: str = request.getfixturevalue("pg_url")
    return found


def seeded(url: str) -> None:
    written(url, seeded_month())


def report(url: str, now: datetime, nodes: tuple[NodeProfile, ...] = ()) -> Any:
    inp = ReportInput(month="2026-11", tz=TZ, book=PriceBook([]), selfhost=SelfHost(node_profiles=nodes),
                      workload_bounds=(4096, 32768, 131072), now=now)
    return build_report(open_store(url, read_only=True), inp)


@functools.cache
def expected(until: datetime) -> dict[str, Any]:
    """The simulation's loads for every minute of [local month start, until), idle ones as 0,
    and nearest-rank percentiles worked out by sorting them all."""
    sim = simulate(seeded_month())
    minutes = range(epoch_minute(LOCAL_START), epoch_minute(until))
    loads = {"requests_in_flight": [], "prefill_tokens_per_s": [], "decode_tokens_per_s": [],
             "kv_tokens_in_flight": []}
    for m in minutes:
        x = sim.get(m)
        loads["requests_in_flight"].append(x.busy_s / 60 if x else Fraction(0))
        loads["prefill_tokens_per_s"].append(x.prefill / 60 if x else Fraction(0))
        loads["decode_tokens_per_s"].append(x.decode / 60 if x else Fraction(0))
        loads["kv_tokens_in_flight"].append(x.kv_token_s / 60 if x else Fraction(0))
    out: dict[str, Any] = {"minutes": len(minutes)}
    for name, values in loads.items():
        ordered = sorted(values)
        n = len(ordered)
        out[name] = {f"p{p}": ordered[math.ceil(p * n / 100) - 1] for p in (50, 95, 99)} | {"max": ordered[-1]}
    kv = loads["kv_tokens_in_flight"]
    peak = max(range(len(kv)), key=lambda i: (kv[i], -i))
    out["peak_minute"] = datetime.fromtimestamp((minutes[0] + peak) * 60, UTC).astimezone(TZ).isoformat()
    calm = sorted(kv)[:len(kv) * 95 // 100]
    out["peak_to_offpeak_ratio"] = kv[peak] / (sum(calm) / len(calm))
    return out


def close(got: float, want: Fraction) -> bool:
    return abs(Fraction(got) - want) <= Fraction(1, 100)  # the report rounds to 0.01


def test_load_by_minute_is_the_simulation_s_percentiles_over_every_minute(url: str) -> None:
    seeded(url)
    d = json.loads(render(report(url, datetime(2026, 12, 15, tzinfo=UTC)), "json"))["load_by_minute"]
    want = expected(LOCAL_END)
    assert d["minutes"] == want["minutes"] == 30 * 1440
    for name in ("requests_in_flight", "prefill_tokens_per_s", "decode_tokens_per_s", "kv_tokens_in_flight"):
        assert set(d[name]) == {"p50", "p95", "p99", "max"}
        for stat in ("p50", "p95", "p99", "max"):
            assert close(d[name][stat], want[name][stat]), (name, stat, d[name][stat], float(want[name][stat]))
    assert d["kv_tokens_in_flight"]["max"] > 100_000  # the agent sessions' long contexts
    assert d["requests_in_flight"]["p50"] == 0  # most minutes are idle, and count
    assert d["peak_minute"] == want["peak_minute"] and d["peak_minute"].endswith("-03:00")
    assert d["peak_to_offpeak_ratio"] == pytest.approx(float(want["peak_to_offpeak_ratio"]), abs=0.01)


def test_a_month_in_progress_counts_the_minutes_so_far(url: str) -> None:
    seeded(url)
    now = MONTH_START + timedelta(days=9, hours=14, minutes=30, seconds=20)
    d = json.loads(render(report(url, now), "json"))["load_by_minute"]
    want = expected(now + timedelta(seconds=40))  # the minute in progress counts
    assert d["minutes"] == want["minutes"]
    for stat in ("p95", "p99", "max"):
        assert close(d["kv_tokens_in_flight"][stat], want["kv_tokens_in_flight"][stat])


def test_nodes_needed_and_the_binding_limit(url: str) -> None:
    seeded(url)
    r = report(url, datetime(2026, 12, 15, tzinfo=UTC), TIGHT)
    d = json.loads(render(r, "json"))
    want = expected(LOCAL_END)
    figure = {"kv_cache": ("kv_tokens_in_flight", "kv_cache_tokens"),
              "prefill": ("prefill_tokens_per_s", "prefill_tokens_per_s"),
              "decode": ("decode_tokens_per_s", "decode_tokens_per_s")}
    assert [x["node"] for x in d["nodes"]] == ["kv-bound", "prefill-bound", "decode-bound"]
    for row, p, binding in zip(d["nodes"], TIGHT, ("kv_cache", "prefill", "decode"), strict=True):
        def need(stat: str, p: NodeProfile = p) -> int:
            return max(math.ceil(want[load][stat] / getattr(p, cap)) for load, cap in figure.values())
        assert row["binding"] == binding
        assert row["needed_peak"] == need("max") > 1
        assert row["needed_p95"] == need("p95")
        assert row["with_redundancy"] == row["needed_peak"] + 1
    shipped = json.loads(render(report(url, datetime(2026, 12, 15, tzinfo=UTC)), "json"))["nodes"]
    assert [x["node"] for x in shipped] == ["8xB300-vllm-fp8", "8xB300-vllm-dcp8", "8xMI355X-vllm-atom"]
    for x in shipped:
        assert all(f["source"].startswith(("vendor claim", "assumption", "third-party")) for f in x["profile"].values())
    assert shipped[0]["profile"]["kv_cache_tokens"]["value"] == 2_600_000
    assert shipped[1]["profile"]["kv_cache_tokens"]["value"] == 18_500_000
    assert shipped[2]["profile"]["decode_tokens_per_s"]["value"] == 17_678


def test_every_format_carries_the_sections(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    seeded(url)
    r = report(url, datetime(2026, 12, 15, tzinfo=UTC), TIGHT)
    rows = list(csv.DictReader(io.StringIO(render(r, "csv"))))
    load = [x for x in rows if x["section"] == "load_by_minute"]
    assert [x["figure"] for x in load] == ["requests_in_flight", "prefill_tokens_per_s", "decode_tokens_per_s",
                                           "kv_tokens_in_flight"]
    assert load[3]["peak_minute"] == json.loads(render(r, "json"))["load_by_minute"]["peak_minute"]
    assert [(x["node"], x["binding"]) for x in rows if x["section"] == "nodes"] == [
        ("kv-bound", "kv_cache"), ("prefill-bound", "prefill"), ("decode-bound", "decode")]
    md = render(r, "md")
    assert "## Load by the minute" in md and "## Nodes the load needs" in md
    assert '| <a id="node-kv-bound"></a>kv-bound |' in md
    html = render(r, "html")
    assert 'data-section="load_by_minute"' in html and 'data-section="nodes"' in html
