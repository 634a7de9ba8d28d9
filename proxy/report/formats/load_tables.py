"""The load by the minute and the nodes it needs, as Markdown and HTML tables show them."""

from __future__ import annotations

from decimal import Decimal

from proxy.ledger.store.slo import SloRow
from proxy.report.formats.links import LOAD, node_anchor, source_anchor, source_href
from proxy.report.formats.speeds import MIN_REQUESTS, millis, rate
from proxy.report.formats.tables import Cell, Column, Table, Value
from proxy.report.load import FIGURES, LoadByMinute
from proxy.report.nodes import NodeNeed
from proxy.report.numbers import count, money_decimal
from proxy.settings import NodeProfile

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


def _figure(p: NodeProfile, figure: str, shown: str) -> Cell:
    return Cell(shown, source_href(p, figure))


def _money_or_rent(p: NodeProfile) -> Value:
    if p.rent_usd_per_month is not None:
        return _figure(p, "rent_usd_per_month", f"{money_decimal(Decimal(p.rent_usd_per_month))}/month")
    return "-" if p.capex_usd is None else _figure(p, "capex_usd", money_decimal(Decimal(p.capex_usd)))


def nodes_table(rows: tuple[NodeNeed, ...]) -> Table:
    def row(x: NodeNeed) -> tuple[Value, ...]:
        p = x.profile
        measured = (Cell(str(x.needed_p95), LOAD), Cell(str(x.needed_peak), LOAD),
                    Cell(_BINDING.get(x.binding, x.binding), LOAD), Cell(str(x.with_redundancy), LOAD))
        return (Cell(x.node, anchor=node_anchor(x.node)), _figure(p, "accelerators", p.accelerators),
                _figure(p, "kv_cache_tokens", count(p.kv_cache_tokens)),
                _figure(p, "prefill_tokens_per_s", count(p.prefill_tokens_per_s)),
                _figure(p, "decode_tokens_per_s", count(p.decode_tokens_per_s)), _money_or_rent(p),
                "-" if p.power_kw is None else _figure(p, "power_kw", f"{Decimal(p.power_kw):,f}"), *measured)

    return Table("nodes", "Nodes the load needs",
                 (Column("profile", numeric=False), Column("accelerators", numeric=False),
                  Column("KV cache", "tokens"), Column("prefill", "tokens/s"), Column("decode", "tokens/s"),
                  Column("capex or rent", "USD per node"), Column("power", "kW per node"),
                  Column("for the p95 minute", "nodes"), Column("for the peak minute", "nodes"),
                  Column("binding limit", numeric=False), Column("with redundancy", "nodes")),
                 tuple(row(x) for x in rows),
                 note="Each node figure links to its source (the next table quotes them all); the nodes needed "
                      "link to the measured load they are sized for.", empty="No node profiles.")


_FIGURE_NAMES = {"accelerators": "accelerators", "capex_usd": "capex per node", "rent_usd_per_month": "rent per node",
                 "power_kw": "power per node", "kv_cache_tokens": "KV cache", "prefill_tokens_per_s": "prefill",
                 "decode_tokens_per_s": "decode"}


def sources_table(rows: tuple[NodeNeed, ...]) -> Table:
    """Every node figure with its source, quoted: a vendor claim, a measurement or an assumption."""
    body: list[tuple[Value, ...]] = []
    for x in rows:
        p = x.profile
        for figure, source in p.sources:
            if getattr(p, figure, None) is None:
                continue
            href = source_href(p, figure)
            body.append((Cell(x.node, anchor=source_anchor(x.node, figure)), _FIGURE_NAMES.get(figure, figure),
                         Cell(source, href) if not href.startswith("#") else source))
    return Table("node_sources", "Node figures and their sources",
                 (Column("profile", numeric=False), Column("figure", numeric=False),
                  Column("source", numeric=False, prose=True)), tuple(body),
                 note="Vendor claims are what a vendor published, under conditions it chose; assumptions have no "
                      "public figure behind them. Shipped profiles link to docs/report.md, which lists them.",
                 empty="No node profiles.")


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
