"""The monthly report as typed data, built once (build.py) and rendered by each format.

Money is integer 10^-10 USD (`*_units`), as in the ledger; a format turns it into text.
Field order follows SPEC "Monthly report", so the JSON format can walk it as written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime

from proxy.ledger.store.slo import SloRow
from proxy.report.alternatives import ModelAlternatives
from proxy.report.curve import CostCurve
from proxy.report.decision import Option
from proxy.report.load import LoadByMinute
from proxy.report.nodes import NodeNeed


@dataclass(frozen=True, slots=True)
class Usage:
    """Requests, the token counts, the fee calls and their cost: one row's sums.

    The fields after `cost_units` came with version 3 (appended, so older positional uses
    still read the same): 1-hour cache writes, web search calls, the fees inside
    `cost_units`, and the upstream's own cost over the `provider_costed` requests that
    reported one.
    """

    requests: int = 0
    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cost_units: int = 0
    cache_write_1h_tokens: int = 0
    web_search_calls: int = 0
    fee_units: int = 0  # per-call fees, 10^-10 USD; a part of cost_units
    provider_cost_units: int = 0  # the upstream's own figure, 10^-10 USD
    provider_costed: int = 0  # requests with a provider cost (0: the figure is unknown, not zero)
    unpriced_requests: int = 0  # metered requests with no price: their cost is not in cost_units

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.requests + other.requests, self.input_tokens + other.input_tokens,
                     self.cache_read_tokens + other.cache_read_tokens,
                     self.cache_write_tokens + other.cache_write_tokens, self.output_tokens + other.output_tokens,
                     self.reasoning_tokens + other.reasoning_tokens, self.cost_units + other.cost_units,
                     self.cache_write_1h_tokens + other.cache_write_1h_tokens,
                     self.web_search_calls + other.web_search_calls, self.fee_units + other.fee_units,
                     self.provider_cost_units + other.provider_cost_units,
                     self.provider_costed + other.provider_costed,
                     self.unpriced_requests + other.unpriced_requests)

    @property
    def cache_writes(self) -> int:
        """Cache writes of both lifetimes (5 minutes and 1 hour)."""
        return self.cache_write_tokens + self.cache_write_1h_tokens

    @property
    def input_side(self) -> int:
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens + self.cache_write_1h_tokens

    @property
    def billed_tokens(self) -> int:
        """The five billing categories; reasoning is inside output."""
        return self.input_side + self.output_tokens

    @property
    def cache_hit_rate(self) -> float:
        """Cache reads over the whole input side, 1-hour writes included (SPEC version 3)."""
        return self.cache_read_tokens / self.input_side if self.input_side else 0.0

    @property
    def cost_known(self) -> bool:
        """False when every dollar of the row is unknown: unpriced requests and no priced cost beside
        them. Such a cost reads "unpriced", never $0.00; with a priced part it is a lower bound."""
        return not (self.unpriced_requests and not self.cost_units)

    @property
    def provider_cost(self) -> int | None:
        """The upstream's own cost, None when no request reported one."""
        return self.provider_cost_units if self.provider_costed else None


@dataclass(frozen=True, slots=True)
class Totals:
    usage: Usage
    estimated_requests: int
    unpriced_requests: int


@dataclass(frozen=True, slots=True)
class ModelRow:
    model: str
    tier: str
    upstream: str
    usage: Usage
    cost_share: float


@dataclass(frozen=True, slots=True)
class TenantRow:
    tenant: str
    usage: Usage
    cost_share: float
    input_tokens_p50: int
    input_tokens_p95: int


@dataclass(frozen=True, slots=True)
class TagRow:
    tag: str
    usage: Usage
    cost_share: float


@dataclass(frozen=True, slots=True)
class WorkloadRow:
    workload: str
    min_input_tokens: int
    usage: Usage
    cost_share: float


@dataclass(frozen=True, slots=True)
class TagWorkloadRow:
    tag: str
    workload: str
    usage: Usage
    cost_share: float


@dataclass(frozen=True, slots=True)
class BandRow:
    """A model and tier's requests priced in one long-context band (0: below every band)."""

    model: str
    tier: str
    above_input_tokens: int
    usage: Usage
    cost_share: float


@dataclass(frozen=True, slots=True)
class SpeedRow:
    """What a model and tier delivered to streamed requests with upstream usage (store.speed)."""

    model: str
    tier: str
    requests: int
    output_tokens_per_s_p50: float
    ttft_ms_p50: int
    ttft_ms_p95: int


@dataclass(frozen=True, slots=True)
class BudgetRow:
    """One `[[budget]]` period that overlaps the report's month (proxy/report/budgets.py)."""

    name: str
    period_start: datetime  # UTC; the budget's own local midnight
    period_end: datetime  # UTC, exclusive
    tz: str  # the budget's time zone, where its periods begin and end
    mode: str  # "alert" | "enforce"
    limit_units: int
    spent_units: int  # the period's priced cost of the requests the budget matches
    rejected_requests: int  # requests the budget refused in the period
    rejected_units: int  # the sum of their reservations: what they would have cost at most
    complete: bool  # the period has ended


@dataclass(frozen=True, slots=True)
class UncertainModelRow:
    """One model, tier and upstream's unpriced or estimated requests (proxy/report/unpriced.py)."""

    model: str  # the canonical model, else the one requested
    tier: str
    upstream: str
    requests: int  # unpriced or estimated (a request that is both counts once)
    tokens: int  # their five billing categories
    unpriced_requests: int
    estimated_requests: int
    cost_units: int  # what the report's cost holds for them: the priced estimated requests' cost
    nearest_model: str | None  # the price-table model the unpriced requests are priced at; None: none known
    nearest_tier: str | None  # the tier of the entry used
    cost_at_nearest_units: int | None  # cost_units + the unpriced requests at the nearest price; None: none known


@dataclass(frozen=True, slots=True)
class UnpricedEstimated:
    """The month's requests whose cost is unknown or rests on estimated usage, and what they would
    cost at the nearest known price (SPEC "Monthly report", version 3)."""

    requests: int = 0  # unpriced or estimated, each request once
    tokens: int = 0
    cost_at_nearest_units: int = 0  # over the rows with a nearest price
    unpriced_requests: int = 0
    unpriced_tokens: int = 0
    unpriced_without_price_requests: int = 0  # unpriced requests for which no price is known at all
    estimated_requests: int = 0
    estimated_tokens: int = 0
    estimated_cost_units: int = 0  # a part of the report's cost
    models: tuple[UncertainModelRow, ...] = ()


@dataclass(frozen=True, slots=True)
class Day:
    date: date
    usage: Usage
    cost_by_model_tier: tuple[tuple[str, int], ...]  # ("model/tier", units), sorted by name


@dataclass(frozen=True, slots=True)
class Hour:
    hour: int  # local hour of day, 0-23
    requests: int
    tokens: int  # the five billing categories


@dataclass(frozen=True, slots=True)
class Forecast:
    month_complete: bool
    projected_cost_units: int
    projected_tokens: int
    method: str


@dataclass(frozen=True, slots=True)
class WhatIf:
    all_standard_units: int
    all_highspeed_units: int
    without_cache_units: int
    all_batch_units: int = 0  # each model at its batch tier where it has one, else as billed
    all_flex_units: int = 0  # each model at its flex tier where it has one, else as billed


@dataclass(frozen=True, slots=True)
class Reprice:
    at: datetime
    cost_units: int


@dataclass(frozen=True, slots=True)
class Assumption:
    name: str
    value: str
    source: str


@dataclass(frozen=True, slots=True)
class SelfHosting:
    assumptions: tuple[Assumption, ...]
    monthly_cost_units: int
    api_cost_units: int
    api_tokens: int
    breakeven_monthly_tokens: int
    volume_multiple_to_breakeven: float
    peak_hour_tokens_per_s: float
    peak_fits: bool
    utilisation: float
    summary: str


@dataclass(frozen=True, slots=True)
class Report:
    month: str  # YYYY-MM
    timezone: str
    tenant: str | None
    generated_at: datetime
    totals: Totals
    cache_hit_rate: float
    estimated_share: float
    unpriced_models: tuple[str, ...]
    by_model: tuple[ModelRow, ...]
    by_tenant: tuple[TenantRow, ...]
    by_tag: tuple[TagRow, ...]
    by_workload: tuple[WorkloadRow, ...]
    by_tag_workload: tuple[TagWorkloadRow, ...]
    by_band: tuple[BandRow, ...]
    workload_summary: str
    daily: tuple[Day, ...]
    hourly_profile: tuple[Hour, ...]
    peak_to_offpeak_ratio: float
    speed: tuple[SpeedRow, ...]
    forecast: Forecast
    what_if: WhatIf
    reprice: Reprice | None  # only with --reprice-at
    self_hosting: SelfHosting
    budgets: tuple[BudgetRow, ...] = ()  # each [[budget]]'s periods that overlap the month
    unpriced_estimated: UnpricedEstimated = UnpricedEstimated()  # requests with no price or estimated usage
    load_by_minute: LoadByMinute = field(default_factory=LoadByMinute)  # proxy/report/load.py
    nodes: tuple[NodeNeed, ...] = ()  # per node profile (proxy/report/nodes.py)
    slo: tuple[SloRow, ...] = ()  # the API's measured speed by model, tier and context band
    cost_curve: CostCurve | None = None  # self-hosted against the API by utilisation; None: no node profile
    decision: tuple[Option, ...] = ()  # keep the API, another provider, or self-host (proxy/report/decision.py)
    pruned_months: tuple[str, ...] = ()  # UTC months of the report whose per-request rows were pruned
    pruned_before_histograms: bool = False  # one was pruned before migration 015: no percentiles, speed or slo
    alternatives: tuple[ModelAlternatives, ...] = ()  # the same model at other providers (alternatives.py)
    alternatives_priced: bool = True  # False: genai-prices (llmmeter[prices]) is not installed
