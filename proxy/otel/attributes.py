"""A ledger record as GenAI semantic-convention span attributes (docs/otel.md lists them).

Pure: the attributes are read from the record the ledger keeps, so a trace and the ledger
agree on every count. Never prompt or completion text: the record holds none.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from urllib.parse import urlsplit

from pricing import UNITS_PER_USD
from proxy.ledger.record import Record
from proxy.times import rfc3339

Value = str | int | float | bool
Attributes = dict[str, Value]

OPT_IN_ENV = "OTEL_SEMCONV_STABILITY_OPT_IN"
LATEST = "gen_ai_latest_experimental"

# llmmeter's endpoints as gen_ai.operation.name values; the others keep their own name.
OPERATIONS: Mapping[str, str] = {
    "chat": "chat", "messages": "chat", "responses": "chat",
    "completions": "text_completion", "embeddings": "embeddings",
}
# gen_ai.provider.name (gen_ai.system before it) for the hosts whose provider the conventions name.
PROVIDERS: Mapping[str, str] = {
    "api.openai.com": "openai", "api.anthropic.com": "anthropic", "api.deepseek.com": "deepseek",
    "api.mistral.ai": "mistral_ai", "api.groq.com": "groq", "api.x.ai": "x_ai",
    "api.perplexity.ai": "perplexity", "generativelanguage.googleapis.com": "gcp.gemini",
    "api.cohere.com": "cohere",
}
# Ledger usage_source -> llmmeter.usage_source: what the upstream reported, or llmmeter counted.
USAGE_SOURCES: Mapping[str, str] = {"upstream": "reported", "estimated": "estimated", "none": "none"}
LOCAL, PROVIDER = "local", "provider"


def latest_requested(env: Mapping[str, str]) -> bool:
    """The comma-separated opt-in list names the latest experimental GenAI conventions."""
    return LATEST in (v.strip() for v in env.get(OPT_IN_ENV, "").split(","))


def provider_name(upstream_name: str, base_url: str) -> str:
    """The conventions' name for a known host; otherwise the upstream's name in llmmeter's config."""
    host = (urlsplit(base_url).hostname or "").lower()
    return PROVIDERS.get(host, upstream_name)


def usd(units: int) -> Decimal:
    return Decimal(units) / UNITS_PER_USD


def call_attributes(rec: Record, provider: str, latest: bool) -> Attributes:
    """Both spans' attributes: the default set names the provider gen_ai.system (conventions
    v1.36.0 and before), the latest experimental set gen_ai.provider.name; the rest is shared."""
    a: Attributes = {"gen_ai.operation.name": OPERATIONS.get(rec.endpoint, rec.endpoint),
                     "gen_ai.provider.name" if latest else "gen_ai.system": provider}
    _put(a, "gen_ai.request.model", rec.model_requested)
    _put(a, "gen_ai.response.model", rec.response_model)
    _put(a, "gen_ai.response.id", rec.upstream_request_id)
    if rec.usage_source != "none":
        # input_tokens counts the whole input side, cached and cache-written tokens included.
        a["gen_ai.usage.input_tokens"] = rec.input_side_tokens
        a["gen_ai.usage.output_tokens"] = rec.output_tokens
        a["gen_ai.usage.cache_read.input_tokens"] = rec.cache_read_tokens
        a["gen_ai.usage.cache_creation.input_tokens"] = rec.cache_write_tokens + rec.cache_write_1h_tokens
        _put(a, "gen_ai.usage.reasoning.output_tokens", rec.reasoning_tokens)
    if rec.cost_units is not None:
        _cost(a, rec.cost_units, LOCAL)
        a["llmmeter.cost_usd"] = str(usd(rec.cost_units))  # exact; the amount above is a double
    a["llmmeter.tenant"] = rec.tenant
    _put(a, "llmmeter.tag", rec.tag)
    _put(a, "llmmeter.tier", rec.tier)
    if rec.price_effective_from is not None:
        a["llmmeter.price_version"] = rfc3339(rec.price_effective_from)
    a["llmmeter.outcome"] = rec.outcome
    a["llmmeter.usage_source"] = USAGE_SOURCES.get(rec.usage_source, rec.usage_source)
    a["llmmeter.record_id"] = rec.id
    if rec.code:
        a["http.response.status_code"] = rec.code
    if rec.outcome != "ok":
        a["error.type"] = rec.outcome
    return a


def upstream_attributes(rec: Record, call: Attributes) -> Attributes:
    """The CLIENT span's: the call's, with the upstream's own cost where it reported one."""
    if rec.provider_cost_units is None:
        return call
    a = dict(call)
    _cost(a, rec.provider_cost_units, PROVIDER)
    return a


def _cost(a: Attributes, units: int, source: str) -> None:
    # The proposed convention (semantic-conventions PR #443) types the amount as a double.
    a["gen_ai.usage.cost.amount"] = float(usd(units))
    a["gen_ai.usage.cost.currency"] = "USD"
    a["gen_ai.usage.cost.source"] = source


def _put(a: Attributes, key: str, value: str | int | None) -> None:
    if value is not None:
        a[key] = value
