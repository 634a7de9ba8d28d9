"""Pages as OpenAI's and Anthropic's admin APIs would write them for a list of calls, each call
also a ledger record as llmmeter would keep it: an exact ledger and its provider's view of it.

A call carries the tier as the provider spells it (OpenAI `default`, `priority`; Anthropic
`standard`, `priority`); its record carries the tier llmmeter resolves from that spelling with
the shipped price tables, so the ledger holds `highspeed` where a model has no `priority` entry.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from pricing.book import PriceBook
from pricing.loader import default_tables_dir, load_dir
from proxy.ledger.record import Record
from tests.reconcile.records import rec

BOOK = PriceBook(load_dir(default_tables_dir()))
BUCKETS_PER_PAGE = 3  # a month of days spreads over several pages, followed by cursor


@dataclass(frozen=True)
class Call:
    day: int  # of November 2026
    model: str
    spelled: str  # the tier as the provider's usage page names it
    batch: bool = False
    embeddings: bool = False  # OpenAI only
    input_tokens: int = 0  # uncached
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cache_write_1h_tokens: int = 0  # Anthropic only
    output_tokens: int = 0
    cost_units: int = 0  # 10^-10 USD, fees included
    fee_units: int = 0  # web searches, Anthropic only


def records(calls: list[Call], upstream: str, *, provider_cost: bool = False) -> list[Record]:
    out = []
    for i, c in enumerate(calls):
        start = datetime(2026, 11, c.day, 12, i % 60, tzinfo=UTC)
        canonical = BOOK.canonical_model(c.model, None)
        tier = "batch" if c.batch else BOOK.resolve_tier(c.model, [c.spelled], model=canonical, at=start)
        endpoint = "batch" if c.batch else "embeddings" if c.embeddings else (
            "messages" if upstream == "anthropic" else "chat")
        r = rec(i, c.day, c.model, start=start, upstream=upstream, endpoint=endpoint, tier=tier,
                       input_tokens=c.input_tokens, cache_read_tokens=c.cache_read_tokens,
                       cache_write_tokens=c.cache_write_tokens, cache_write_1h_tokens=c.cache_write_1h_tokens,
                       output_tokens=c.output_tokens, cost_units=c.cost_units, fee_units=c.fee_units,
                       web_search_calls=c.fee_units and 1,
                       provider_cost_units=c.cost_units if provider_cost else None)
        r.model = canonical  # the price table's name; providers report the served one (response_model)
        out.append(r)
    return out


def openai_pages(calls: list[Call]) -> dict[str, list[bytes]]:
    usage: dict[int, dict[tuple[str, str, bool], dict[str, int]]] = {}
    costs: dict[int, dict[str, int]] = {}
    for c in calls:
        costs.setdefault(c.day, {}).setdefault(c.model, 0)
        costs[c.day][c.model] += c.cost_units
        if c.embeddings:
            continue  # the completions usage leaves embeddings out
        r = usage.setdefault(c.day, {}).setdefault((c.model, "default" if c.batch else c.spelled, c.batch), {
            "input_tokens": 0, "input_cached_tokens": 0, "input_cache_write_tokens": 0, "output_tokens": 0,
            "num_model_requests": 0})
        r["input_tokens"] += c.input_tokens + c.cache_read_tokens + c.cache_write_tokens
        r["input_cached_tokens"] += c.cache_read_tokens
        r["input_cache_write_tokens"] += c.cache_write_tokens
        r["output_tokens"] += c.output_tokens
        r["num_model_requests"] += 1
    usage_buckets = [_openai_bucket(day, [
        {"object": "organization.usage.completions.result", **counts, "model": model, "service_tier": tier,
         "batch": batch, "project_id": None, "api_key_id": None}
        for (model, tier, batch), counts in groups.items()]) for day, groups in sorted(usage.items())]
    cost_buckets = [_openai_bucket(day, [
        {"object": "organization.costs.result", "amount": {"value": _Number(units), "currency": "usd"},
         "line_item": f"{model}, input and output", "project_id": None}
        for model, units in by_model.items()]) for day, by_model in sorted(costs.items())]
    return {"/v1/organization/usage/completions": _paged(usage_buckets, {"object": "page"}),
            "/v1/organization/costs": _paged(cost_buckets, {"object": "page"})}


def anthropic_pages(calls: list[Call]) -> dict[str, list[bytes]]:
    usage: dict[int, dict[tuple[str, str], dict[str, int]]] = {}
    token_cost: dict[int, dict[tuple[str, str], int]] = {}
    fees: dict[int, int] = {}
    for c in calls:
        tier = "batch" if c.batch else c.spelled
        r = usage.setdefault(c.day, {}).setdefault((c.model, tier), {
            "uncached_input_tokens": 0, "cache_read_input_tokens": 0, "5m": 0, "1h": 0, "output_tokens": 0})
        r["uncached_input_tokens"] += c.input_tokens
        r["cache_read_input_tokens"] += c.cache_read_tokens
        r["5m"] += c.cache_write_tokens
        r["1h"] += c.cache_write_1h_tokens
        r["output_tokens"] += c.output_tokens
        by_model = token_cost.setdefault(c.day, {})
        by_model[(c.model, tier)] = by_model.get((c.model, tier), 0) + c.cost_units - c.fee_units
        fees[c.day] = fees.get(c.day, 0) + c.fee_units
    usage_buckets = [_anthropic_bucket(day, [
        {"uncached_input_tokens": r["uncached_input_tokens"], "cache_read_input_tokens": r["cache_read_input_tokens"],
         "cache_creation": {"ephemeral_5m_input_tokens": r["5m"], "ephemeral_1h_input_tokens": r["1h"]},
         "output_tokens": r["output_tokens"], "server_tool_use": {"web_search_requests": 0}, "api_key_id": None,
         "workspace_id": None, "model": model, "service_tier": tier, "context_window": "0-200k"}
        for (model, tier), r in groups.items()]) for day, groups in sorted(usage.items())]
    cost_buckets = []
    for day, by_model in sorted(token_cost.items()):
        results = [_anthropic_cost(_cents(units), "tokens", model, tier) for (model, tier), units in by_model.items()]
        if fees[day]:
            results.append(_anthropic_cost(_cents(fees[day]), "web_search", None, None))
        cost_buckets.append(_anthropic_bucket(day, results))
    return {"/v1/organizations/usage_report/messages": _paged(usage_buckets, {}),
            "/v1/organizations/cost_report": _paged(cost_buckets, {})}


class _Number:
    """An amount the page writes as a JSON number, exactly (OpenAI's costs)."""

    def __init__(self, units: int) -> None:
        self.text = format(Decimal(units).scaleb(-10), "f")


def _cents(units: int) -> str:
    return format(Decimal(units).scaleb(-8), "f")  # Anthropic: a decimal string in cents


def _anthropic_cost(amount: str, cost_type: str, model: str | None, tier: str | None) -> dict[str, Any]:
    return {"amount": amount, "currency": "USD", "cost_type": cost_type, "description": cost_type, "model": model,
            "service_tier": tier, "token_type": "uncached_input_tokens" if model else None, "workspace_id": None,
            "context_window": "0-200k" if model else None}


def _openai_bucket(day: int, results: list[dict[str, Any]]) -> dict[str, Any]:
    lo = int(datetime(2026, 11, day, tzinfo=UTC).timestamp())
    return {"object": "bucket", "start_time": lo, "end_time": lo + 86_400, "results": results}


def _anthropic_bucket(day: int, results: list[dict[str, Any]]) -> dict[str, Any]:
    return {"starting_at": f"2026-11-{day:02d}T00:00:00Z", "ending_at": f"2026-11-{day:02d}T23:59:59Z",
            "results": results}


def _paged(buckets: list[dict[str, Any]], head: dict[str, Any]) -> list[bytes]:
    chunks = [buckets[i:i + BUCKETS_PER_PAGE] for i in range(0, len(buckets), BUCKETS_PER_PAGE)] or [[]]
    pages = []
    for i, chunk in enumerate(chunks):
        last = i == len(chunks) - 1
        pages.append(_dumps({**head, "data": chunk, "has_more": not last, "next_page": None if last else f"page_{i}"}))
    return pages


def _dumps(doc: dict[str, Any]) -> bytes:
    text = json.dumps(doc, default=lambda n: f"\x00{n.text}\x00")
    return re.sub(r'"\\u0000([-0-9.]+)\\u0000"', r"\1", text).encode()
