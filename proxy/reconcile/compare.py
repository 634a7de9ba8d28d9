"""llmmeter's daily sums against the provider's, row by row, with what explains a difference."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from fnmatch import fnmatchcase

from pricing import UNITS_PER_USD
from proxy.ledger.store.daily import DailyRow
from proxy.reconcile.model import (
    ALL_MODELS,
    CATEGORIES,
    NOT_PER_MODEL,
    Counts,
    Key,
    Measure,
    ProviderData,
    Reconciliation,
    Row,
    TierNames,
)
from proxy.settings import ReconcileSource

NOT_NARROWED = "provider side cannot be narrowed to llmmeter's traffic: it counts the whole organization"


@dataclass(slots=True)
class _Ledger:
    counts: Counts = field(default_factory=Counts)
    cost_units: int = 0
    fee_units: int = 0
    requests: int = 0
    estimated: int = 0
    unpriced: int = 0

    def add(self, r: DailyRow) -> None:
        self.counts.add(Counts(r.input_tokens, r.cache_read_tokens, r.cache_write_tokens + r.cache_write_1h_tokens,
                               r.output_tokens))
        self.cost_units += r.cost_units
        self.fee_units += r.fee_units
        self.requests += r.requests
        self.estimated += r.estimated
        self.unpriced += r.unpriced


def usd(units: int) -> Decimal:
    return Decimal(units) / UNITS_PER_USD


def narrowed(provider: str, source: ReconcileSource) -> bool:
    """Whether the provider's usage is narrowed to some keys, projects or workspaces."""
    if provider == "openai":
        return bool(source.project_ids or source.api_key_ids)
    return bool(source.api_key_ids or source.workspace_ids)


def ledger_rows(rows: list[DailyRow], upstreams: tuple[str, ...]) -> list[DailyRow]:
    """The ledger side: `[reconcile.X] upstreams` (names or globs; none: every upstream)."""
    if not upstreams:
        return rows
    return [r for r in rows if any(fnmatchcase(r.upstream, u) for u in upstreams)]


def compare(data: ProviderData, rows: list[DailyRow], rec: Reconciliation, source: ReconcileSource,
            tier_aliases: Mapping[str, str] | None = None) -> None:
    """Fill `rec` with one row per day × model × tier, then the per-day dollar rows. Tiers are
    matched through the tier aliases (built in, then `tier_aliases`: `[[tier_alias]]`)."""
    is_narrowed = narrowed(data.provider, source)
    tier = TierNames(tier_aliases or {}, {t for _, _, t in (*data.usage, *data.usd)})
    _rekey(data, tier)
    by_key: dict[Key, _Ledger] = {}
    by_day: dict[date, _Ledger] = {}
    for r in rows:
        # OpenAI's completions usage leaves embeddings out (its daily dollars keep them): their
        # tokens are not compared there, their cost still is, in the day's total.
        if not (r.embeddings and data.provider == "openai"):
            by_key.setdefault((r.day, r.model, tier(r.tier) if data.has_tier else ""), _Ledger()).add(r)
        by_day.setdefault(r.day, _Ledger()).add(r)
    for key in sorted(set(by_key) | set(data.usage) | set(data.usd)):
        rec.rows.append(_model_row(key, by_key.get(key), data, is_narrowed, rec.threshold_pct))
    if data.has_cost:
        for day in sorted(set(by_day) | set(data.day_usd)):
            row = _day_row(day, by_day.get(day), data, is_narrowed, rec.threshold_pct)
            if row is not None:
                rec.rows.append(row)
    rec.rows.sort(key=lambda r: (r.day, r.scope != "model", r.model, r.tier))
    rec.notes.extend(_general(data, source, is_narrowed))


def _rekey(data: ProviderData, tier: TierNames) -> None:
    """The provider's rows under the names compared (two spellings of one tier add up)."""
    usage, data.usage = data.usage, {}
    for (day, model, t), counts in usage.items():
        data.add_usage((day, model, tier(t)), counts)
    usd, data.usd = data.usd, {}
    for (day, model, t), amount in usd.items():
        data.add_usd((day, model, tier(t)), amount)


def _model_row(key: Key, led: _Ledger | None, data: ProviderData, is_narrowed: bool, threshold: Decimal) -> Row:
    day, model, tier = key
    led = led or _Ledger()
    given = data.usage.get(key, Counts()) if data.has_usage else None
    measures = [Measure(c, led.counts.get(c), None if given is None else given.get(c)) for c in CATEGORIES]
    per_model_usd = data.has_cost and data.provider == "anthropic" and not data.day_usd_is_total
    # Anthropic's per-model dollars are token costs: its web searches are the day's, like llmmeter's fees.
    measures.append(Measure("cost_usd", usd(led.cost_units - led.fee_units),
                            data.usd.get(key, Decimal(0)) if per_model_usd else None))
    row = Row(day, model, tier, "model", measures, led.requests, led.estimated, led.unpriced)
    row.exceeds = any(m.exceeds(threshold) for m in measures)
    if not led.requests:
        row.notes.append("llmmeter has no record of this model on this day")
    elif data.has_usage and key not in data.usage:
        row.notes.append("the provider reports no usage of this model on this day (another organization or key, "
                         "or a model or tier the provider names differently)")
    _explain(row, is_narrowed)
    return row


def _day_row(day: date, led: _Ledger | None, data: ProviderData, is_narrowed: bool, threshold: Decimal) -> Row | None:
    led = led or _Ledger()
    provider = data.day_usd.get(day, Decimal(0))
    if data.day_usd_is_total:
        mine, model = led.cost_units, ALL_MODELS
    else:
        mine, model = led.fee_units, NOT_PER_MODEL
        if not mine and not provider:
            return None
    measure = Measure("cost_usd", usd(mine), provider)
    row = Row(day, model, "", "day", [measure], led.requests, led.estimated, led.unpriced)
    row.exceeds = measure.exceeds(threshold)
    if data.provider == "openai":
        row.notes.append("OpenAI's Costs API gives dollars per day, project and line item, not per model")
    elif not data.day_usd_is_total:
        row.notes.append("web search, code execution and other costs billed per call, not per model "
                         "(llmmeter: the fees in its costs)")
    _explain(row, is_narrowed)
    return row


def _explain(row: Row, is_narrowed: bool) -> None:
    if row.estimated:
        row.notes.append(f"{row.estimated} of llmmeter's {row.requests} requests had estimated usage "
                         "(the upstream reported none)")
    if row.unpriced:
        row.notes.append(f"{row.unpriced} requests unpriced in llmmeter (no price entry): their dollars are "
                         "missing on llmmeter's side")
    provider_more = any(m.provider is not None and m.provider > m.llmmeter for m in row.measures)
    if provider_more:
        row.notes.append("the provider's figure includes traffic of the narrowed keys that did not pass through "
                         "llmmeter" if is_narrowed else NOT_NARROWED)


def _general(data: ProviderData, source: ReconcileSource, is_narrowed: bool) -> list[str]:
    notes = [f"llmmeter side: {'upstreams ' + ', '.join(source.upstreams) if source.upstreams else 'every upstream'}"]
    if data.provider == "openai":
        ids = [*(f"project {p}" for p in source.project_ids), *(f"API key {k}" for k in source.api_key_ids)]
        if ids:
            notes.append("provider usage narrowed to " + ", ".join(ids)
                         + ("; its costs to the projects" if source.project_ids else
                            "; its costs cannot be narrowed by API key (the Costs API groups by project only)"))
    else:
        ids = [*(f"workspace {w}" for w in source.workspace_ids), *(f"API key {k}" for k in source.api_key_ids)]
        if ids:
            notes.append("provider usage narrowed to " + ", ".join(ids)
                         + ("; its costs to the workspaces" if source.workspace_ids else
                            "; its costs cannot be narrowed by API key (the cost report groups by workspace)"))
    if not is_narrowed:
        notes.append(NOT_NARROWED + " (set project_ids, api_key_ids or workspace_ids in [reconcile."
                     + data.provider + "])")
    if not data.has_usage:
        notes.append("no usage pages: tokens are not compared")
    if not data.has_cost:
        notes.append("no cost pages: dollars are not compared")
    if data.outside_month:
        notes.append(f"{data.outside_month} buckets outside the month left out")
    notes.append("tokens: input is uncached input; cache writes are 5-minute plus 1-hour; output includes reasoning")
    return notes
