"""`reconcile --against provider_cost`: llmmeter's cost of each request against the cost its
upstream reported with it (`provider_cost_usd`: OpenRouter, xAI), request by request, and
summed per UTC day and model so the threshold applies as for the other sources."""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal

from proxy.ledger.record import Record
from proxy.reconcile.compare import usd
from proxy.reconcile.model import Key, Measure, Reconciliation, RequestDiff, Row
from proxy.times import rfc3339

MAX_LISTED = 10_000  # requests kept for the listing; the totals count every one


def compare_requests(records: Iterable[Record], rec: Reconciliation) -> None:
    sums: dict[Key, list[int]] = {}  # key -> [requests, cost units, provider units, unpriced]
    listed = 0
    for r in records:
        if r.provider_cost_units is None:
            continue
        rec.compared_requests += 1
        key = (r.start.date(), r.response_model or r.model_requested or "", r.tier or "")
        s = sums.setdefault(key, [0, 0, 0, 0])
        s[0] += 1
        s[1] += r.cost_units or 0
        s[2] += r.provider_cost_units
        s[3] += r.cost_units is None
        if r.cost_units != r.provider_cost_units:
            listed += 1
            if listed <= MAX_LISTED:
                rec.requests.append(RequestDiff(r.id, rfc3339(r.start, "milliseconds"), r.upstream, key[1],
                                                None if r.cost_units is None else usd(r.cost_units),
                                                usd(r.provider_cost_units)))
    for (day, model, tier), (n, mine, theirs, unpriced) in sorted(sums.items()):
        measure = Measure("cost_usd", usd(mine), usd(theirs))
        row = Row(day, model, tier, "model", [measure], n, 0, unpriced, measure.exceeds(rec.threshold_pct))
        if unpriced:
            row.notes.append(f"{unpriced} requests unpriced in llmmeter (no price entry): their dollars are "
                             "missing on llmmeter's side")
        rec.rows.append(row)
    rec.notes.append("requests whose upstream reported its own cost (OpenRouter, xAI); the provider side is "
                     "exactly llmmeter's traffic")
    if listed > MAX_LISTED:
        rec.notes.append(f"{listed} requests differ; the first {MAX_LISTED} are listed")
    if not rec.compared_requests:
        rec.notes.append("no request this month carried a provider cost")


def difference_pct(d: RequestDiff) -> Decimal | None:
    return Measure("cost_usd", d.cost_usd or Decimal(0), d.provider_cost_usd).pct if d.cost_usd is not None else None
