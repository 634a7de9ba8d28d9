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
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any

from proxy.reconcile.fetch import ReconcileError
from proxy.reconcile.model import EXACT, UNKNOWN_MODEL, Counts, ProviderData, tier_name
from proxy.settings import ReconcileSource

OPENAI_USAGE = "organization.usage.completions.result"
OPENAI_COST = "organization.costs.result"
MAX_TOKENS = 10**15  # tokens in one result: far beyond any organization's month
MAX_AMOUNT = Decimal(10) ** 12  # dollars (or cents) in one result
MAX_PLACES = 24
_YEAR_10000 = 253_402_300_800  # Unix seconds of 10000-01-01


class Month:
    """The UTC days a reconciliation covers: [first, following)."""

    def __init__(self, first: date, following: date) -> None:
        self.first, self.following = first, following

    def __contains__(self, day: date) -> bool:
        return self.first <= day < self.following


# --- OpenAI ---------------------------------------------------------------------------------
def openai_usage_page(doc: dict[str, Any], data: ProviderData, month: Month, source: ReconcileSource,
                      page: str) -> None:
    for day, r in _results(doc, month, data, page, _openai_day):
        obj = r.get("object")
        if obj is not None and obj != OPENAI_USAGE:
            continue  # embeddings, images ...: not what the completions ledger rows count
        if _outside(r, "project_id", source.project_ids) or _outside(r, "api_key_id", source.api_key_ids):
            continue
        where = f"{page}, bucket {day}"
        given = _count(r, "input_tokens", where)
        cached = _count(r, "input_cached_tokens", where)
        written = _count(r, "input_cache_write_tokens", where) + _count(r, "input_cache_write_12h_tokens", where)
        # input_tokens includes the cached and cache-write tokens: uncached input is never negative.
        if cached > given:
            raise ReconcileError(f"{where}: input_cached_tokens ({cached}) is more than input_tokens ({given}), "
                                 "which includes them")
        if cached + written > given:
            raise ReconcileError(f"{where}: input_cached_tokens and input_cache_write_tokens ({cached} + {written}) "
                                 f"are more than input_tokens ({given}), which includes them")
        tier = "batch" if r.get("batch") is True else tier_name(_text(r.get("service_tier")))
        data.add_usage((day, _text(r.get("model")) or UNKNOWN_MODEL, tier),
                       Counts(given - cached - written, cached, written, _count(r, "output_tokens", where)))


def openai_cost_page(doc: dict[str, Any], data: ProviderData, month: Month, source: ReconcileSource,
                     page: str) -> None:
    data.day_usd_is_total = True
    for day, r in _results(doc, month, data, page, _openai_day):
        if _outside(r, "project_id", source.project_ids):
            continue
        amount = r.get("amount")
        if amount is None:
            continue
        where = f"{page}, bucket {day}"
        if not isinstance(amount, dict):
            raise ReconcileError(f"{where}: amount is not an object")
        currency = str(amount.get("currency") or "usd").lower()
        if currency != "usd":
            raise ReconcileError(f"{where}: an amount in {currency!r}; only USD can be compared")
        data.add_day_usd(day, _number(amount.get("value"), where, "amount.value"))


def _openai_day(bucket: dict[str, Any], where: str) -> date:
    t = bucket.get("start_time")
    if type(t) is not int:
        raise ReconcileError(f"{where}: a bucket without an integer start_time")
    if not 0 <= t < _YEAR_10000:
        raise ReconcileError(f"{where}: a bucket whose start_time {t} is not a Unix time from 1970 to 9999")
    return datetime.fromtimestamp(t, UTC).date()


# --- Anthropic ------------------------------------------------------------------------------
def anthropic_usage_page(doc: dict[str, Any], data: ProviderData, month: Month, source: ReconcileSource,
                         page: str) -> None:
    for day, r in _results(doc, month, data, page, _anthropic_day):
        if _outside(r, "api_key_id", source.api_key_ids) or _outside(r, "workspace_id", source.workspace_ids):
            continue
        where = f"{page}, bucket {day}"
        creation = r.get("cache_creation")
        creation = creation if isinstance(creation, dict) else {}
        written = (_count(creation, "ephemeral_5m_input_tokens", where)
                   + _count(creation, "ephemeral_1h_input_tokens", where))
        data.add_usage((day, _text(r.get("model")) or UNKNOWN_MODEL, tier_name(_text(r.get("service_tier")))),
                       Counts(_count(r, "uncached_input_tokens", where), _count(r, "cache_read_input_tokens", where),
                              written, _count(r, "output_tokens", where)))


def anthropic_cost_page(doc: dict[str, Any], data: ProviderData, month: Month, source: ReconcileSource,
                        page: str) -> None:
    for day, r in _results(doc, month, data, page, _anthropic_day):
        if source.workspace_ids and _text(r.get("workspace_id")) not in source.workspace_ids:
            continue  # grouped by workspace_id (null: the default workspace) and not one of the narrowed
        where = f"{page}, bucket {day}"
        currency = str(r.get("currency") or "USD").upper()
        if currency != "USD":
            raise ReconcileError(f"{where}: an amount in {currency!r}; only USD can be compared")
        raw = r.get("amount")
        if not isinstance(raw, str):
            raise ReconcileError(f"{where}: amount {raw!r} is not the decimal string of cents the cost report gives")
        with localcontext(EXACT):
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
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.astimezone(UTC).date()
    except (ValueError, OverflowError):  # OverflowError: a time whose UTC day is before year 1 or after 9999
        raise ReconcileError(f"{where}: a bucket whose starting_at {str(t)[:64]!r} is not an RFC 3339 time "
                             "from year 1 to 9999") from None


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
    if type(v) is not int or not 0 <= v <= MAX_TOKENS:
        raise ReconcileError(f"{where}: {name} is {_short(v)}, not a token count (0 to {MAX_TOKENS:,})")
    return v


def _number(v: object, where: str, name: str = "amount") -> Decimal:
    """An exact amount: an int, a Decimal decoded from the page's text, or a decimal string; at
    most 10^12 to 24 decimal places, so every sum and difference stays exact (model.EXACT)."""
    try:
        if isinstance(v, bool) or not isinstance(v, int | Decimal | str):
            raise InvalidOperation
        d = Decimal(v)
        if not d.is_finite():
            raise InvalidOperation
    except (InvalidOperation, ValueError):
        raise ReconcileError(f"{where}: {name} {_short(v)} is not a number") from None
    if d.copy_abs() > MAX_AMOUNT or (d and _decimal_places(d) > MAX_PLACES):  # copy_abs: no context, no overflow
        raise ReconcileError(f"{where}: {name} {_short(v)} is not an amount a bill carries "
                             f"(at most {MAX_AMOUNT:,} to {MAX_PLACES} decimal places)")
    return d


def _decimal_places(d: Decimal) -> int:
    """Decimal places of a non-zero amount, trailing zeros aside ("1.50" has 1)."""
    _, digits, exponent = d.as_tuple()
    zeros = len(digits) - len("".join(map(str, digits)).rstrip("0"))
    return max(0, -int(exponent) - zeros)


def _short(v: object) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _text(v: object) -> str:
    return v if isinstance(v, str) else ""

