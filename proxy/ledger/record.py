"""The ledger record: one per request, the unit the journal, database and export share."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from typing import Any

from pricing import UNITS_PER_USD
from proxy.times import parse_rfc3339, rfc3339

# SPEC "Ledger": export columns, in this order; new ones are only ever appended.
EXPORT_COLUMNS: tuple[str, ...] = (
    "id", "start", "tenant", "upstream", "endpoint", "model_requested", "model", "tier",
    "stream", "code", "input_tokens", "cache_read_tokens", "cache_write_tokens",
    "output_tokens", "reasoning_tokens", "usage_source", "price_effective_from", "cost_usd",
    "duration_ms", "ttft_ms", "tag", "workload", "outcome", "end_user", "response_model",
    "upstream_request_id",
    # Appended in version 2 (SPEC "Ledger"), in this order.
    "cache_write_1h_tokens", "web_search_calls", "price_band", "provider_cost_usd", "flags",
    # Appended in version 4 (migration 009): how many requests the row stands for.
    "request_count",
)

# Money in the ledger is an integer count of 10^-10 USD (SPEC "Price tables").
COST_UNITS_PER_USD = UNITS_PER_USD


# No slots: orjson writes a dict-backed dataclass from its __dict__ in about a third of the
# time a slotted one takes (0.6 against 1.6 µs), and the journal writes every record on the
# event loop. The cost is ~90 bytes more per record held in the backlog.
@dataclass
class Record:
    """Everything llmmeter keeps about one request. Never prompt or completion text."""

    id: str
    start: datetime  # UTC, timezone-aware
    tenant: str
    endpoint: str  # "chat", "completions", "embeddings", "responses", "messages", "models", "other"
    stream: bool
    code: int  # HTTP status the client got; 0 when none was sent
    outcome: str  # ok | upstream_http_error | upstream_unreachable | upstream_timeout | ...
    upstream: str = ""
    end_user: str | None = None
    model_requested: str | None = None
    response_model: str | None = None
    model: str | None = None  # canonical price-table model, None when unknown
    tier: str | None = None
    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int | None = None
    usage_source: str = "upstream"  # upstream | estimated | none (nothing reported, nothing counted)
    flags: list[str] = field(default_factory=list)
    price_model: str | None = None
    price_tier: str | None = None
    price_effective_from: datetime | None = None
    cost_units: int | None = None  # 10^-10 USD; None when unpriced
    duration_ms: int = 0
    ttft_ms: int | None = None
    tag: str | None = None
    workload: str | None = None
    upstream_request_id: str | None = None
    # Version 2 (migration 007); a record journaled before them reads as 0 / None.
    cache_write_1h_tokens: int = 0  # a sixth billing category, part of the input side
    web_search_calls: int = 0  # per-call fee count
    price_band: int | None = None  # the band's above_input_tokens, 0 below every band; None unpriced
    fee_units: int | None = None  # the fees inside cost_units (a subset), 10^-10 USD; None unpriced
    provider_cost_units: int | None = None  # the upstream's own figure, 10^-10 USD; None when it gave none
    # Enforced budgets (migration 008): the request's reservation and the leases it came from
    # (comma-separated lease ids), or, on a request a budget refused, that budget's name.
    reserved_units: int | None = None
    budget_leases: str | None = None
    budget: str | None = None
    # Migration 009: how many requests this record stands for. 1 for every request; more for the
    # record that aggregates one minute's refusals before a key was known (flag `aggregated`).
    request_count: int = 1

    def to_json_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (times as RFC 3339) used by the journal."""
        d = asdict(self)
        d["start"] = _iso(self.start)
        d["price_effective_from"] = _iso(self.price_effective_from)
        return d

    @classmethod
    def from_json_dict(cls, d: dict[str, Any]) -> Record:
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        kw["start"] = _parse(kw["start"])
        kw["price_effective_from"] = _parse(kw.get("price_effective_from"))
        kw["flags"] = list(kw.get("flags") or [])
        return cls(**kw)

    @property
    def input_side_tokens(self) -> int:
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens + self.cache_write_1h_tokens


def _iso(t: datetime | None) -> str | None:
    return None if t is None else rfc3339(t, "microseconds")


def _parse(s: str | None) -> datetime | None:
    return None if s is None else parse_rfc3339(s)
