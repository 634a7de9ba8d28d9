"""`load_by_minute`, `nodes` and `slo` as the JSON and CSV formats write them (SPEC "Self-hosting,
version 2"): loads rounded to 0.01, the peak minute in RFC 3339 in the report's zone."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from proxy.ledger.store.slo import SloRow
from proxy.report.load import FIGURES, LoadByMinute
from proxy.report.nodes import NodeNeed
from proxy.settings import NODE_FIGURES

STATS = ("p50", "p95", "p99", "max")


def rounded(v: Fraction) -> float:
    return round(float(v), 2)


def load_dict(x: LoadByMinute) -> dict[str, Any]:
    d: dict[str, Any] = {name: {stat: rounded(getattr(x.figure(name), stat)) for stat in STATS} for name in FIGURES}
    d["peak_minute"] = None if x.peak_minute is None else x.peak_minute.isoformat(timespec="seconds")
    d["peak_to_offpeak_ratio"] = None if x.peak_to_offpeak_ratio is None else round(x.peak_to_offpeak_ratio, 2)
    d["minutes"] = x.minutes
    return d


def load_rows(d: dict[str, Any]) -> list[dict[str, Any]]:
    """A CSV row per load; the peak minute and ratio (defined on the KV cache) on its row."""
    rows = []
    for name in FIGURES:
        row = {"figure": name, **d[name]}
        if name == "kv_tokens_in_flight":
            row.update(peak_minute=d["peak_minute"], peak_to_offpeak_ratio=d["peak_to_offpeak_ratio"])
        rows.append(row)
    return rows


def node_dict(x: NodeNeed) -> dict[str, Any]:
    p = x.profile
    figures = {f: {"value": _plain(getattr(p, f)), "source": p.source(f)}
               for f in NODE_FIGURES if getattr(p, f) is not None}
    return {"node": x.node, "needed_p95": x.needed_p95, "needed_peak": x.needed_peak, "binding": x.binding,
            "with_redundancy": x.with_redundancy, "profile": figures}


def _plain(v: object) -> object:
    return v if isinstance(v, int | str) else format(v, "f")  # Decimal money and kW as exact strings


def slo_dict(x: SloRow) -> dict[str, Any]:
    """SPEC's keys, then how many requests ran past their first token (what tokens/s rest on)."""
    return {"model": x.model, "tier": x.tier, "band": x.band, "requests": x.requests, "ttft_ms_p50": x.ttft_ms_p50,
            "ttft_ms_p95": x.ttft_ms_p95, "output_tokens_per_s_p50": x.output_tokens_per_s_p50,
            "output_tokens_per_s_p95": x.output_tokens_per_s_p95, "output_timed_requests": x.timed_requests}
