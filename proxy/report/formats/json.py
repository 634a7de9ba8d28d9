"""The report as JSON: SPEC "Monthly report"'s keys, money as exact decimal strings."""

from __future__ import annotations

import json
from typing import Any

from pricing import format_usd
from proxy.report.formats.alternatives import alternatives_rows
from proxy.report.formats.curve import curve_dict
from proxy.report.formats.decision import decision_dict
from proxy.report.formats.load import load_dict, node_dict, slo_dict
from proxy.report.model import (
    BudgetRow,
    Day,
    Report,
    SelfHosting,
    SpeedRow,
    UncertainModelRow,
    UnpricedEstimated,
    Usage,
)
from proxy.times import rfc3339

# The figures a prune leaves (migrations 015 and 016 keep them apart from the per-request rows),
# unavailable (not zero) only for a month pruned before those existed.
NEED_ROWS = ("by_tenant.input_tokens_p50", "by_tenant.input_tokens_p95", "speed", "slo", "unpriced_estimated")


def render_json(r: Report) -> str:
    return json.dumps(report_dict(r), indent=2) + "\n"


def report_dict(r: Report) -> dict[str, Any]:
    """The JSON contract as a dict; the csv format writes the same rows."""
    t = r.totals
    d: dict[str, Any] = {
        "month": r.month, "timezone": r.timezone, "tenant": r.tenant,
        "generated_at": rfc3339(r.generated_at, "seconds"),
        "totals": {"requests": t.usage.requests, **tokens(t.usage), "estimated_requests": t.estimated_requests,
                   "unpriced_requests": t.unpriced_requests, **money(t.usage)},
        "cache_hit_rate": r.cache_hit_rate, "estimated_share": r.estimated_share,
        "unpriced_models": list(r.unpriced_models),
    }
    d.update(sections(r))
    d["workload_summary"] = r.workload_summary
    d["daily"] = [day(x) for x in r.daily]
    d["hourly_profile"] = [{"hour": h.hour, "requests": h.requests, "tokens": h.tokens} for h in r.hourly_profile]
    d["peak_to_offpeak_ratio"] = r.peak_to_offpeak_ratio
    d["speed"] = [speed(x) for x in r.speed]
    d["unpriced_estimated"] = unpriced_estimated(r.unpriced_estimated)
    d["budgets"] = [budget(x) for x in r.budgets]
    f, w = r.forecast, r.what_if
    d["forecast"] = {"month_complete": f.month_complete, "projected_cost_usd": format_usd(f.projected_cost_units),
                     "projected_tokens": f.projected_tokens, "method": f.method}
    d["what_if"] = {"all_standard_usd": format_usd(w.all_standard_units),
                    "all_highspeed_usd": format_usd(w.all_highspeed_units),
                    "without_cache_usd": format_usd(w.without_cache_units),
                    "all_batch_usd": format_usd(w.all_batch_units), "all_flex_usd": format_usd(w.all_flex_units)}
    if r.reprice is not None:
        d["reprice"] = {"at": rfc3339(r.reprice.at, "auto"), "cost_usd": format_usd(r.reprice.cost_units)}
    d["self_hosting"] = self_hosting(r.self_hosting)
    d["load_by_minute"] = load_dict(r.load_by_minute)
    d["nodes"] = [node_dict(x) for x in r.nodes]
    d["slo"] = [slo_dict(x) for x in r.slo]
    d["cost_curve"] = curve_dict(r.cost_curve)
    d["decision"] = [decision_dict(x) for x in r.decision]
    d["alternatives"] = alternatives_rows(r.alternatives)
    if r.pruned_months:  # retention: what the rollups still give, and what needed the deleted rows
        lost = NEED_ROWS if r.pruned_before_histograms else ()
        d["pruned_months"] = {"months": list(r.pruned_months), "unavailable": list(lost)}
    return d


def tokens(u: Usage) -> dict[str, int]:
    return {"input_tokens": u.input_tokens, "cache_read_tokens": u.cache_read_tokens,
            "cache_write_tokens": u.cache_write_tokens, "output_tokens": u.output_tokens,
            "reasoning_tokens": u.reasoning_tokens, "cache_write_1h_tokens": u.cache_write_1h_tokens,
            "web_search_calls": u.web_search_calls}


def money(u: Usage) -> dict[str, str | None]:
    """cost_usd (null when no request of it had a price: unknown, not zero), the fees inside it, and
    the upstream's own figure (null when no request had one)."""
    provider = u.provider_cost
    return {"cost_usd": format_usd(u.cost_units) if u.cost_known else None, "fees_usd": format_usd(u.fee_units),
            "provider_cost_usd": None if provider is None else format_usd(provider)}


def _usage(u: Usage, share: float) -> dict[str, Any]:
    """A row's sums; `unpriced_requests` > 0 makes its cost a lower bound (null: unknown), and its share too."""
    return {"requests": u.requests, **tokens(u), **money(u), "cost_share": share if u.cost_known else None,
            "unpriced_requests": u.unpriced_requests}


def sections(r: Report) -> dict[str, list[dict[str, Any]]]:
    """The breakdowns (by_model ... by_tag_workload, by_band), in the contract's order."""
    return {
        "by_model": [{"model": x.model, "tier": x.tier, "upstream": x.upstream, **_usage(x.usage, x.cost_share)}
                     for x in r.by_model],
        "by_tenant": [{"tenant": x.tenant, **_usage(x.usage, x.cost_share), "input_tokens_p50": x.input_tokens_p50,
                       "input_tokens_p95": x.input_tokens_p95} for x in r.by_tenant],
        "by_tag": [{"tag": x.tag, **_usage(x.usage, x.cost_share), "cache_hit_rate": x.usage.cache_hit_rate}
                   for x in r.by_tag],
        "by_workload": [{"workload": x.workload, "min_input_tokens": x.min_input_tokens,
                         **_usage(x.usage, x.cost_share), "cache_hit_rate": x.usage.cache_hit_rate}
                        for x in r.by_workload],
        "by_tag_workload": [{"tag": x.tag, "workload": x.workload, **_usage(x.usage, x.cost_share)}
                            for x in r.by_tag_workload],
        "by_band": [{"model": x.model, "tier": x.tier, "above_input_tokens": x.above_input_tokens,
                     **_usage(x.usage, x.cost_share)} for x in r.by_band],
    }


def day(x: Day) -> dict[str, Any]:
    return {"date": x.date.isoformat(), "requests": x.usage.requests, **tokens(x.usage), **money(x.usage),
            "unpriced_requests": x.usage.unpriced_requests,
            "cost_by_model_tier": {k: format_usd(v) for k, v in x.cost_by_model_tier}}


def speed(x: SpeedRow) -> dict[str, Any]:
    return {"model": x.model, "tier": x.tier, "requests": x.requests,
            "output_tokens_per_s_p50": x.output_tokens_per_s_p50, "ttft_ms_p50": x.ttft_ms_p50,
            "ttft_ms_p95": x.ttft_ms_p95}


def budget(x: BudgetRow) -> dict[str, Any]:
    """A budget's period: limit, spent, and the requests it refused with their worst-case cost."""
    return {"name": x.name, "period_start": rfc3339(x.period_start, "seconds"),
            "period_end": rfc3339(x.period_end, "seconds"), "limit_usd": format_usd(x.limit_units),
            "spent_usd": format_usd(x.spent_units), "rejected_requests": x.rejected_requests,
            "rejected_cost_usd": format_usd(x.rejected_units)}


def unpriced_estimated(u: UnpricedEstimated) -> dict[str, Any]:
    """SPEC's four keys (requests, tokens, cost_at_nearest_usd, models), then the split between
    unpriced and estimated requests; models as rows of model, tier and upstream."""
    return {"requests": u.requests, "tokens": u.tokens, "cost_at_nearest_usd": format_usd(u.cost_at_nearest_units),
            "models": [uncertain_model(x) for x in u.models],
            "unpriced_requests": u.unpriced_requests, "unpriced_tokens": u.unpriced_tokens,
            "unpriced_without_price_requests": u.unpriced_without_price_requests,
            "estimated_requests": u.estimated_requests, "estimated_tokens": u.estimated_tokens,
            "estimated_cost_usd": format_usd(u.estimated_cost_units)}


def uncertain_model(x: UncertainModelRow) -> dict[str, Any]:
    at = x.cost_at_nearest_units
    return {"model": x.model, "tier": x.tier, "upstream": x.upstream, "requests": x.requests, "tokens": x.tokens,
            "unpriced_requests": x.unpriced_requests, "estimated_requests": x.estimated_requests,
            "cost_usd": format_usd(x.cost_units), "nearest_model": x.nearest_model, "nearest_tier": x.nearest_tier,
            "cost_at_nearest_usd": None if at is None else format_usd(at)}


def self_hosting(sh: SelfHosting) -> dict[str, Any]:
    return {"assumptions": {a.name: {"value": a.value, "source": a.source} for a in sh.assumptions},
            "monthly_cost_usd": format_usd(sh.monthly_cost_units), "api_cost_usd": format_usd(sh.api_cost_units),
            "api_tokens": sh.api_tokens, "breakeven_monthly_tokens": sh.breakeven_monthly_tokens,
            "volume_multiple_to_breakeven": sh.volume_multiple_to_breakeven,
            "peak_hour_tokens_per_s": sh.peak_hour_tokens_per_s, "peak_fits": sh.peak_fits,
            "utilisation": sh.utilisation, "summary": sh.summary}
