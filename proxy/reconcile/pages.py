"""Reading the providers' usage and cost pages into ProviderData (shapes: tests/reconcile/fixtures/README.md).

OpenAI — GET /organization/usage/completions: `{"object": "page", "data": [{"object": "bucket",
"start_time": unix, "end_time": unix, "results": [{"object": "organization.usage.completions.result",
"input_tokens", "input_cached_tokens", "output_tokens", "num_model_requests", "model", "batch",
"service_tier", ...}]}], "has_more", "next_page"}`; input_tokens counts cached (and, where the page
says so, cache-write) tokens. GET /organization/costs: the same page with results
`{"object": "organization.costs.result", "amount": {"value": number, "currency": "usd"},
"line_item", "project_id"}`.
Anthropic — GET /organizations/usage_report/messages: `{"data": [{"starting_at": RFC 3339,
"ending_at", "results": [{"uncached_input_tokens", "cache_read_input_tokens", "cache_creation":
{"ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens"}, "output_tokens", "model",
"service_tier", "workspace_id", "api_key_id", ...}]}], "has_more", "next_page"}`.
GET /organizations/cost_report: results `{"amount": "123.45" (a decimal string in cents),
"currency": "USD", "cost_type", "model", "service_tier", "token_type", "workspace_id", ...}`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from proxy.reconcile.fetch import ReconcileError
from proxy.reconcile.model import UNKNOWN_MODEL, Counts, ProviderData, tier_name
from proxy.settings import ReconcileSource

OPENAI_USAGE = "organization.usage.completions.result"
OPENAI_COST = "organization.costs.result"


class Month:
    """The UTC days a reconciliation covers: [first, following)."""

    def __init__(self, first: date, following: date) -> None:
        self.first, self.following = first, following

    def __contains__(self, day: date) -> bool:
        return self.first <= day < self.following


# --- OpenAI ---------------------------------------------------------------------------------
def openai_usage_page(doc: dict[str, Any], data: ProviderData, month: Month, source: ReconcileSource) -> None:
    for day, r in _results(doc, month, data, "openai usage", _openai_day):
        obj = r.get("object")
        if obj is not None and obj != OPENAI_USAGE:
            continue  # embeddings, images ...: not what the completions ledger rows count
        if _outside(r, "project_id", source.project_ids) or _outside(r, "api_key_id", source.api_key_ids):
            continue
        where = f"openai usage {day}"
        given = _count(r, "input_tokens", where)
        cached = _count(r, "input_cached_tokens", where)
        written = _count(r, "input_cache_write_tokens", where) + _count(r, "input_cache_write_12h_tokens", where)
        tier = "batch" if r.get("batch") is True else tier_name(_text(r.get("service_tier")))
        data.add_usage((day, _text(r.get("model")) or UNKNOWN_MODEL, tier),
                       Counts(given - cached - written, cached, written, _count(r, "output_tokens", where)))


def openai_cost_page(doc: dict[str, Any], data: ProviderData, month: Month, source: ReconcileSource) -> None:
    data.day_usd_is_total = True
    for day, r in _results(doc, month, data, "openai costs", _openai_day):
        if _outside(r, "project_id", source.project_ids):
            continue
        amount = r.get("amount")
        if amount is None:
            continue
        if not isinstance(amount, dict):
            raise ReconcileError(f"openai costs {day}: amount is not an object")
        currency = str(amount.get("currency") or "usd").lower()
        if currency != "usd":
            raise ReconcileError(f"openai costs {day}: an amount in {currency!r}; only USD can be compared")
        data.add_day_usd(day, _number(amount.get("value"), f"openai costs {day}"))


def _openai_day(bucket: dict[str, Any], where: str) -> date:
    t = bucket.get("start_time")
    if type(t) is not int:
        raise ReconcileError(f"{where}: a bucket without an integer start_time")
    return datetime.fromtimestamp(t, UTC).date()


# --- Anthropic ------------------------------------------------------------------------------
def anthropic_usage_page(doc: dict[str, Any], data: ProviderData, month: Month, source: ReconcileSource) -> None:
    for day, r in _results(doc, month, data, "anthropic usage", _anthropic_day):
        if _outside(r, "api_key_id", source.api_key_ids) or _outside(r, "workspace_id", source.workspace_ids):
            continue
        where = f"anthropic usage {day}"
        creation = r.get("cache_creation")
        creation = creation if isinstance(creation, dict) else {}
        written = (_count(creation, "ephemeral_5m_input_tokens", where)
                   + _count(creation, "ephemeral_1h_input_tokens", where))
        data.add_usage((day, _text(r.get("model")) or UNKNOWN_MODEL, tier_name(_text(r.get("service_tier")))),
                       Counts(_count(r, "uncached_input_tokens", where), _count(r, "cache_read_input_tokens", where),
                              written, _count(r, "output_tokens", where)))


def anthropic_cost_page(doc: dict[str, Any], data: ProviderData, month: Month, source: ReconcileSource) -> None:
    for day, r in _results(doc, month, data, "anthropic cost", _anthropic_day):
        if source.workspace_ids and _text(r.get("workspace_id")) not in source.workspace_ids:
            continue  # grouped by workspace_id (null: the default workspace) and not one of the narrowed
        where = f"anthropic cost {day}"
        currency = str(r.get("currency") or "USD").upper()
        if currency != "USD":
            raise ReconcileError(f"{where}: an amount in {currency!r}; only USD can be compared")
        raw = r.get("amount")
        if not isinstance(raw, str):
            raise ReconcileError(f"{where}: amount {raw!r} is not the decimal string of cents the cost report gives")
        usd = _number(raw, where) / 100  # the lowest currency unit: "123.45" is $1.2345
        model, cost_type = _text(r.get("model")), r.get("cost_type")
        if cost_type is None:  # not grouped by description: the day's whole cost
            data.day_usd_is_total = True
            data.add_day_usd(day, usd)
        elif cost_type == "tokens" and model:
            data.add_usd((day, model, tier_name(_text(r.get("service_tier")))), usd)
        else:  # web search, code execution, sessions: billed per day, not per model
            data.add_day_usd(day, usd)


def _anthropic_day(bucket: dict[str, Any], where: str) -> date:
    t = bucket.get("starting_at")
    try:
        parsed = datetime.fromisoformat(str(t).replace("Z", "+00:00"))
    except ValueError:
        raise ReconcileError(f"{where}: a bucket whose starting_at {t!r} is not an RFC 3339 time") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC).date()


def finish(data: ProviderData) -> None:
    """A cost report read without the description grouping has no per-model dollars: all are the day's."""
    if data.provider == "anthropic" and data.day_usd_is_total and data.usd:
        for (day, _, _), amount in data.usd.items():
            data.add_day_usd(day, amount)
        data.usd.clear()


# --- shared ---------------------------------------------------------------------------------
def _results(doc: dict[str, Any], month: Month, data: ProviderData, where: str,
             day_of: Any) -> list[tuple[date, dict[str, Any]]]:
    buckets = doc.get("data")
    if not isinstance(buckets, list):
        raise ReconcileError(f"{where}: a page without a `data` list")
    data.pages += 1
    out: list[tuple[date, dict[str, Any]]] = []
    for bucket in buckets:
        if not isinstance(bucket, dict):
            raise ReconcileError(f"{where}: a bucket that is not an object")
        day = day_of(bucket, where)
        results = bucket.get("results", bucket.get("result", []))  # some references spell it `result`
        if not isinstance(results, list):
            raise ReconcileError(f"{where} {day}: results is not a list")
        if day not in month:
            data.outside_month += 1
            continue
        out.extend((day, r) for r in results if isinstance(r, dict))
    return out


def _outside(r: dict[str, Any], name: str, ids: Sequence[str]) -> bool:
    """A result grouped by `name` whose id is not among the narrowed ones (none narrowed: never)."""
    value = r.get(name)
    return bool(ids) and isinstance(value, str) and value not in ids


def _count(r: dict[str, Any], name: str, where: str) -> int:
    v = r.get(name)
    if v is None:
        return 0
    if type(v) is not int or v < 0:
        raise ReconcileError(f"{where}: {name} is {v!r}, not a token count")
    return v


def _number(v: object, where: str) -> Decimal:
    """An exact amount: an int, a Decimal decoded from the page's text, or a decimal string."""
    try:
        if isinstance(v, bool) or not isinstance(v, int | Decimal | str):
            raise InvalidOperation
        d = Decimal(v)
        if not d.is_finite():
            raise InvalidOperation
    except (InvalidOperation, ValueError):
        raise ReconcileError(f"{where}: amount {v!r} is not a number") from None
    return d


def _text(v: object) -> str:
    return v if isinstance(v, str) else ""

