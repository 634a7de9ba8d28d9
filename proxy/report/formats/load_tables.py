"""The load by the minute and the nodes it needs, as Markdown and HTML tables show them."""

from __future__ import annotations

from proxy.ledger.store.slo import SloRow
from proxy.report.formats.speeds import MIN_REQUESTS, millis, rate
from proxy.report.formats.tables import Column, Table
from proxy.report.load import FIGURES, LoadByMinute
from proxy.report.nodes import NodeNeed
from proxy.report.numbers import count

_NAMES = {"requests_in_flight": ("requests in flight", "requests"),
          "prefill_tokens_per_s": ("prefill (input side)", "tokens/s"),
          "decode_tokens_per_s": ("decode (output)", "tokens/s"),
          "kv_tokens_in_flight": ("KV cache in flight", "tokens")}
_BINDING = {"kv_cache": "KV cache", "prefill": "prefill", "decode": "decode", "none": "-"}


def load_table(x: LoadByMinute) -> Table:
    rows = tuple((*_NAMES[name], *(f"{float(getattr(x.figure(name), s)):,.2f}" for s in ("p50", "p95", "p99", "max")))
                 for name in FIGURES)
    peak = ("no load this month" if x.peak_minute is None
            else f"the peak minute starts {x.peak_minute.isoformat(timespec='seconds')}")
    ratio = ("" if x.peak_to_offpeak_ratio is None
             else f"; peak to off-peak (all but the busiest 5% of minutes) {x.peak_to_offpeak_ratio:,.2f}x")
    return Table("load_by_minute", "Load by the minute",
                 (Column("load", numeric=False), Column("unit", numeric=False), Column("p50"), Column("p95"),
                  Column("p99"), Column("max")), rows,
                 note=f"Over {count(x.minutes)} minutes, idle minutes as 0 (UTC minutes); {peak}{ratio}. "
                      "Each request's input side is spread over its time to first token, its output from the "
                      "first token to its end.")


def nodes_table(rows: tuple[NodeNeed, ...]) -> Table:
    body = tuple((x.node, x.profile.accelerators, count(x.profile.kv_cache_tokens),
                  count(x.profile.prefill_tokens_per_s), count(x.profile.decode_tokens_per_s), str(x.needed_p95),
                  str(x.needed_peak), _BINDING.get(x.binding, x.binding), str(x.with_redundancy)) for x in rows)
    sources = "; ".join(f"{x.node}: " + ", ".join(f"{f} ({s})" for f, s in x.profile.sources) for x in rows)
    return Table("nodes", "Nodes the load needs",
                 (Column("profile", numeric=False), Column("accelerators", numeric=False),
                  Column("KV cache", "tokens"), Column("prefill", "tokens/s"), Column("decode", "tokens/s"),
                  Column("for the p95 minute", "nodes"), Column("for the peak minute", "nodes"),
                  Column("binding limit", numeric=False), Column("with redundancy", "nodes")), body,
                 note=f"Node figures and their sources: {sources}.", empty="No node profiles.")


_BANDS = {"lt_32k": "< 32k", "32k_128k": "32k-128k", "ge_128k": ">= 128k"}


def slo_table(rows: tuple[SloRow, ...]) -> Table:
    body = tuple((x.model, x.tier, _BANDS.get(x.band, x.band), count(x.requests), millis(x.ttft_ms_p50, x.requests),
                  millis(x.ttft_ms_p95, x.requests), count(x.timed_requests),
                  rate(x.output_tokens_per_s_p50, x.timed_requests), rate(x.output_tokens_per_s_p95, x.timed_requests))
                 for x in rows)
    return Table("slo", "The service level to match",
                 (Column("model", numeric=False), Column("tier", numeric=False),
                  Column("input side", numeric=False), Column("requests"), Column("TTFT p50", "ms"),
                  Column("TTFT p95", "ms"), Column("requests past first token"), Column("output p50", "tokens/s"),
                  Column("output p95", "tokens/s")), body,
                 note="What the API delivered to streamed requests with the upstream's usage, per request: a "
                      "self-hosted deployment must match it under the same load. Output tokens/s are after the "
                      "first token, over the requests that ran past it. A figure over fewer than "
                      f"{MIN_REQUESTS} requests is not shown, and a time below the ledger's millisecond reads < 1.",
                 empty="No streamed requests with usage from the upstream this month.")
