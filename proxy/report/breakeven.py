"""Self-hosting against the API: the month's own traffic priced both ways (SPEC "Monthly report")."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal

from proxy.ledger.store import HourlyRow
from proxy.report.groups import usage
from proxy.report.model import Assumption, SelfHosting
from proxy.report.numbers import money, money_decimal
from proxy.settings import SelfHost

_SOURCES = {
    "nodes": "launch coverage: a second node for redundancy",
    "node_capex_usd": "launch coverage: US$550,000-650,000 per 8-GPU node",
    "amortization_months": "assumption, no source",
    "power_kw_per_node": "assumption, no source",
    "usd_per_kwh": "assumption, no source",
    "ops_usd_per_month": "assumption, no source (staff share)",
    "node_prefill_tokens_per_s": "assumption, no source",
    "node_decode_tokens_per_s": "vendor claim: 17,678 tokens/s aggregate on 8x MI355X, conditions unpublished",
}


def self_hosting(rows: list[HourlyRow], sh: SelfHost, self_hosted_upstreams: frozenset[str],
                 start: datetime, end: datetime, now: datetime) -> SelfHosting:
    api = [row for row in rows if row.upstream not in self_hosted_upstreams and row.metered]
    api_units = sum(row.cost_units for row in api)
    api_tokens = sum(usage(row).billed_tokens for row in api)
    monthly = sh.monthly_cost_usd()
    # Amortisation can divide to a repeating decimal: kept to the ledger's 10^-10 USD.
    monthly_units = int((monthly * 10**10).quantize(Decimal(1), ROUND_HALF_EVEN))
    breakeven = int(Decimal(monthly_units) * api_tokens / api_units) if api_units else 0
    multiple = breakeven / api_tokens if api_tokens else 0.0
    # Per clock hour of the month: the load the nodes would have carried.
    by_hour: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for row in rows:
        if row.metered:
            h = by_hour[row.hour]
            h[0] += usage(row).input_side
            h[1] += row.output_tokens
    prefill = sh.nodes * sh.node_prefill_tokens_per_s
    decode = sh.nodes * sh.node_decode_tokens_per_s
    peak = max(by_hour.values(), key=lambda v: v[0] + v[1], default=[0, 0])
    fits = peak[0] / 3600 <= prefill and peak[1] / 3600 <= decode
    # The month's hours so far (all of them once it is complete): idle hours count as 0.
    hours = max(1.0, (min(end, max(now, start)) - start) / timedelta(hours=1))
    load = sum(max(i / 3600 / prefill, o / 3600 / decode) for i, o in by_hour.values())
    utilisation = load / hours if hours else 0.0
    if api_tokens:
        summary = (f"At your volume ({api_tokens:,} API tokens this month) the API costs "
                   f"{money(api_units)}; self-hosting on {sh.nodes} nodes costs "
                   f"{money_decimal(monthly)} a month and breaks even at {multiple:,.1f}x your volume "
                   f"({breakeven:,} tokens a month). The peak hour {'fits' if fits else 'does not fit'} the assumed "
                   f"node throughput; the nodes would be {utilisation:.1%} utilised.")
    else:
        summary = "No API traffic this month: nothing to compare self-hosting with."
    return SelfHosting(assumptions=assumptions(sh), monthly_cost_units=monthly_units, api_cost_units=api_units,
                       api_tokens=api_tokens, breakeven_monthly_tokens=breakeven,
                       volume_multiple_to_breakeven=multiple, peak_hour_tokens_per_s=(peak[0] + peak[1]) / 3600,
                       peak_fits=fits, utilisation=utilisation, summary=summary)


def assumptions(sh: SelfHost) -> tuple[Assumption, ...]:
    out = []
    for name, source in _SOURCES.items():
        value = getattr(sh, name)
        out.append(Assumption(name=name,
                              value=format(value.normalize(), "f") if isinstance(value, Decimal) else str(value),
                              source="llmmeter.toml [selfhost]" if name in sh.overridden else source))
    return tuple(out)
