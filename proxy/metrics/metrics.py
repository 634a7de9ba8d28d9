"""Prometheus metrics (SPEC "Prometheus metrics"), registered on an injected registry.

Label values come only from configuration; anything else becomes `other`, so no client
can grow the series count. Counters are a float view of the exact integer ledger.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from pricing import Cost, PriceBook
from pricing.model import BILLING_TYPES
from proxy.ledger.record import COST_UNITS_PER_USD, Record
from proxy.metrics.curve import CostCurveGauges
from proxy.metrics.known import MAX_SERIES, known_series
from proxy.metrics.load import request_load
from proxy.metrics.tally import Buckets, Level, Sum, Tally
from proxy.protocol.names import ENDPOINTS, FAULT_KINDS, METERED, REFUSAL_REASONS, UNAUTHENTICATED
from proxy.report.curve import CostCurve
from proxy.report.nodes import LIMITS, profiles
from proxy.settings import Settings

OTHER = "other"
log = logging.getLogger("llmmeter.metrics")
TOKEN_BUCKETS = (16, 64, 256, 1024, 4096, 16384, 32768, 65536, 131072, 262144, 524288, 1048576)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
# Finer where LLM first tokens fall (0.2-2 s): between 0.25 and 0.5 s a p95 was read 60% high.
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.3, 0.4, 0.5, 0.75, 1, 1.5, 2, 2.5, 5, 10, 30, 60, 120, 300,
                600)
PENDING_EVERY_S = 0.5
OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1)


class Labels:
    """Maps request values onto the configured label sets."""

    def __init__(self, settings: Settings, book: PriceBook) -> None:
        self.models = frozenset(book.models)
        self.tiers = frozenset({"standard", "highspeed"} | {t for m in book.models for t in book.tiers(m)}
                               | {to for _, to in settings.tier_aliases})
        # `unauthenticated`: requests refused before a key was known (docs/tenants.md); one value
        # more, reserved so no tenant can take it, so the series stay bounded.
        self.tenants = frozenset({"default", UNAUTHENTICATED} | {t.name for t in settings.tenants})
        self.tags = frozenset(settings.tags)
        self.upstreams = frozenset(u.name for u in settings.upstreams)

    @staticmethod
    def pick(value: str | None, allowed: frozenset[str]) -> str:
        return value if value is not None and value in allowed else OTHER


def multiprocess_dir() -> str | None:
    """Set for `--workers` > 1: every worker's values live in files there (prometheus_client)."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


class Metrics:
    def __init__(self, settings: Settings, book: PriceBook, registry: CollectorRegistry,
                 month_to_date: Callable[[datetime], Mapping[str, int]] | None = None,
                 pending: Callable[[], int] | None = None,
                 ledger_counts: Callable[[], tuple[int, int]] | None = None,
                 cost_curve: Callable[[datetime], CostCurve | None] | None = None) -> None:
        """`ledger_counts`: the ledger's (rejected, lost) records so far (Ledger.rejected, Ledger.lost);
        `cost_curve`: the report's cost curve for the UTC month so far (proxy/report/curve.py month_so_far)."""
        self.labels = Labels(settings, book)
        self._keys: dict[tuple[str | int | None, ...], _Keys] = {}
        # With several workers, `registry` (the one /metrics reads) gets a collector that sums
        # every worker's files; the metrics themselves register on a private one.
        multiproc = multiprocess_dir() is not None
        r = CollectorRegistry() if multiproc else registry
        shared = r if multiproc else None  # per-request families: plain dicts unless shared
        self.requests = Sum("llmmeter_requests", "Requests through the proxy",
                            ["upstream", "endpoint", "model", "tier", "tenant", "code", "outcome"], shared)
        self.tokens = Sum("llmmeter_tokens", "Tokens by billing category", ["model", "tier", "tenant", "type"], shared)
        self.reasoning = Sum("llmmeter_reasoning_tokens", "Reasoning tokens (a subset of output)",
                             ["model", "tier", "tenant"], shared)
        # Spend is one counter: its `type` is a billing category or a fee (web_search), so any
        # sum of it is the whole cost, as the ledger has it.
        self.cost = Sum("llmmeter_cost_usd", "Cost in USD by billing category and fee (type web_search): "
                        "summed over type, the whole cost", ["model", "tier", "tenant", "type"], shared)
        self.fees = Sum("llmmeter_fees_usd", "Per-call fees in USD by fee, without tier (the same amounts are in "
                        "llmmeter_cost_usd_total under their fee's type)", ["model", "tenant", "fee"], shared)
        self.provider_cost = Sum("llmmeter_provider_cost_usd", "The cost the upstream itself reported, in USD",
                                 ["model", "tenant"], shared)
        self.provider_costed = Sum("llmmeter_provider_costed_usd",
                                   "llmmeter's own cost of the requests whose upstream reported a cost, in USD",
                                   ["model", "tenant"], shared)
        self.estimated = Sum("llmmeter_estimated_requests", "Requests whose tokens were estimated", ["model"], shared)
        self.unpriced = Sum("llmmeter_unpriced_requests", "Requests with no price entry", ["model"], shared)
        self.duration = Buckets("llmmeter_request_duration_seconds", "Request duration", ["endpoint", "model"],
                                LATENCY_BUCKETS, shared)
        self.ttft = Buckets("llmmeter_time_to_first_token_seconds", "Time to first token (streams)",
                            ["model", "tier"], TTFT_BUCKETS, shared)
        self.overhead = Buckets("llmmeter_proxy_overhead_seconds", "Time the proxy itself adds", ["endpoint"],
                                OVERHEAD_BUCKETS, shared)
        self.upstream_errors = Counter("llmmeter_upstream_errors", "Upstream failures",
                                       ["upstream", "kind"], registry=r)
        # Spans the OpenTelemetry export dropped with its queue full (docs/otel.md); 0 while it is off.
        self.otel_dropped_spans = Counter("llmmeter_otel_dropped_spans",
                                          "Trace spans dropped because the export queue was full", registry=r)
        self.pool_waiting = Gauge("llmmeter_upstream_pool_waiting",
                                  "Requests waiting for a connection to their upstream (max_connections)",
                                  ["upstream"], registry=r, multiprocess_mode="livesum")
        for up in settings.upstreams:
            self.pool_waiting.labels(up.name).set(0)
        self.input_tokens = Buckets("llmmeter_request_input_tokens", "Input-side tokens per request", ["model"],
                                    TOKEN_BUCKETS, shared)
        self.output_tokens = Buckets("llmmeter_request_output_tokens", "Output tokens per request", ["model"],
                                     TOKEN_BUCKETS, shared)
        self.tagged_cost = Sum("llmmeter_tagged_cost_usd", "Cost by tag and workload class", ["tag", "workload"],
                               shared)
        # Live load (proxy/metrics/load.py): rate() of each is the report's load_by_minute figure.
        self.in_flight = Sum("llmmeter_in_flight_seconds", "Seconds requests were in flight (rate: mean requests "
                             "in flight), counted when a request ends", ["model"], shared)
        self.prefill = Sum("llmmeter_prefill_tokens", "Input-side tokens of requests served live (rate: prefill "
                           "tokens/s), counted when a request ends", ["model"], shared)
        self.decode = Sum("llmmeter_decode_tokens", "Output tokens of requests served live (rate: decode tokens/s), "
                          "counted when a request ends", ["model"], shared)
        self.kv = Sum("llmmeter_kv_token_seconds", "KV token-seconds of requests served live (rate: mean KV tokens "
                      "in flight), counted when a request ends", ["model"], shared)
        # Beside the counters (which count a request at its end): the requests under way, read at scrape.
        self.requests_in_flight = Level("llmmeter_requests_in_flight", "Requests served live being relayed now "
                                        "(as llmmeter_in_flight_seconds_total counts them)", r, multiproc)
        self.faults = Sum("llmmeter_metering_faults", "Usage fields or streams the readers could not use, by kind",
                          ["kind"], shared)
        # The kinds are a fixed set: each series exists from the start, at 0 (alerts need no absent()).
        self._fault_adders = {kind: self.faults.adder((kind,)) for kind in sorted(FAULT_KINDS)}
        for add in self._fault_adders.values():
            add(0.0)
        # Refusals before a key is known (SPEC "Version 4 additions"): a fixed set of reasons, each
        # series there from the start at 0, so an alert on a rise needs no absent().
        refusals = Counter("llmmeter_refusals", "Requests refused before a key was known (401), by reason",
                           ["reason"], registry=r)
        self._refusals = {reason: refusals.labels(reason) for reason in REFUSAL_REASONS}
        # Gauges every worker sets alike: "max" shows the value once, with no pid label.
        budget = Gauge("llmmeter_monthly_budget_usd", "Configured monthly budgets", ["tenant"], registry=r,
                       multiprocess_mode="max")
        budget.labels("all").set(float(settings.monthly_budget_usd))
        for t in settings.tenants:
            budget.labels(t.name).set(float(t.monthly_budget_usd))
        Gauge("llmmeter_selfhost_monthly_cost_usd", "Monthly self-hosting cost from [selfhost]",
              registry=r, multiprocess_mode="max").set(float(settings.selfhost.monthly_cost_usd()))
        node = Gauge("llmmeter_selfhost_node_tokens_per_second", "Assumed node throughput",
                     ["phase"], registry=r, multiprocess_mode="max")
        node.labels("prefill").set(settings.selfhost.node_prefill_tokens_per_s)
        node.labels("decode").set(settings.selfhost.node_decode_tokens_per_s)
        # Each profile's capacity per limit, so a panel divides the live load by it (nodes needed now).
        capacity = Gauge("llmmeter_selfhost_node_capacity", "A node profile's capacity per limit: KV cache in tokens, "
                         "prefill and decode in tokens/s ([[selfhost.node]] or the shipped profiles)",
                         ["node", "limit"], registry=r, multiprocess_mode="max")
        for p in profiles(settings.selfhost):
            for limit, _, figure in LIMITS:
                capacity.labels(p.name, limit).set(getattr(p, figure))
        self._zero_known(settings, book)
        if not multiproc:
            registry.register(Tally((self.requests, self.tokens, self.reasoning, self.cost, self.fees,
                                     self.provider_cost, self.provider_costed, self.estimated,
                                     self.unpriced, self.duration, self.ttft, self.overhead, self.input_tokens,
                                     self.output_tokens, self.tagged_cost, self.faults, self.in_flight,
                                     self.prefill, self.decode, self.kv)))
        else:
            from prometheus_client.multiprocess import MultiProcessCollector

            MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            # The backlog of every worker, not just the one that answers the scrape.
            gauge = Gauge("llmmeter_ledger_pending_records", "Records journaled but not yet in the database",
                          registry=r, multiprocess_mode="livesum")
            if pending is not None:
                _publish_every(PENDING_EVERY_S, lambda: gauge.set(pending()))
        registry.register(_Live(book, self.labels, month_to_date, pending, with_pending=not multiproc))
        if cost_curve is not None:
            registry.register(CostCurveGauges(cost_curve))
        if ledger_counts is not None:
            if multiproc:
                _publish_ledger_counts(r, ledger_counts)
            else:
                registry.register(_LedgerCounts(ledger_counts))

    def _zero_known(self, settings: Settings, book: PriceBook) -> None:
        """The series the configuration names, at 0 from the start (proxy/metrics/known.py)."""
        known = known_series(settings, book)
        if known.over_cap:
            log.warning("metrics: the upstreams' models globs name %d counter series, more than %d: per-model "
                        "series start with their first call (narrow the globs to have them at 0 from the start)",
                        known.over_cap, MAX_SERIES)
        for family, keys in ((self.tokens, known.tokens), (self.cost, known.cost), (self.reasoning, known.reasoning),
                             (self.fees, known.fees), (self.provider_cost, known.provider),
                             (self.provider_costed, known.provider), (self.tagged_cost, known.tagged),
                             (self.estimated, known.estimated), (self.unpriced, known.unpriced),
                             (self.in_flight, known.load), (self.prefill, known.load), (self.decode, known.load),
                             (self.kv, known.load)):
            for key in keys:
                family.zero(key)
        for upstream, kind in known.upstream_errors:
            self.upstream_errors.labels(upstream, kind)  # a labelled child starts at 0

    def observe(self, rec: Record, cost: Cost | None, overhead_s: float) -> None:
        """Counts one finished request, on the event loop."""
        raw = (rec.model, rec.tier, rec.tenant, rec.upstream, rec.endpoint, rec.tag, rec.workload, rec.code,
               rec.outcome)
        k = self._keys.get(raw)
        if k is None:
            k = self._prepare(raw)
        k.request(1.0)
        k.duration(rec.duration_ms / 1000)
        if rec.flags:
            for flag in rec.flags:
                add = self._fault_adders.get(flag)
                if add is not None:
                    add(1.0)
        k.overhead(overhead_s)
        if rec.ttft_ms is not None:
            k.ttft(rec.ttft_ms / 1000)
        if not k.metered:
            return
        add_input, add_cache_read, add_cache_write, add_cache_write_1h, add_output = k.tokens
        if rec.input_tokens:
            add_input(rec.input_tokens)
        if rec.cache_read_tokens:
            add_cache_read(rec.cache_read_tokens)
        if rec.cache_write_tokens:
            add_cache_write(rec.cache_write_tokens)
        if rec.cache_write_1h_tokens:
            add_cache_write_1h(rec.cache_write_1h_tokens)
        if rec.output_tokens:
            add_output(rec.output_tokens)
        if rec.reasoning_tokens:
            k.reasoning(rec.reasoning_tokens)
        if rec.usage_source == "estimated":
            k.estimated(1.0)
        input_side = rec.input_side_tokens
        k.input_tokens(input_side)
        k.output_tokens(rec.output_tokens)
        if k.live:
            in_flight, prefill, decode, kv = k.load
            seconds, kv_token_seconds = request_load(rec.duration_ms, rec.ttft_ms, rec.stream, input_side,
                                                     rec.output_tokens)
            in_flight(seconds)
            if input_side:
                prefill(input_side)
            if rec.output_tokens:
                decode(rec.output_tokens)
            kv(kv_token_seconds)
        provider = rec.provider_cost_units
        if provider is not None:
            k.provider_cost(provider / COST_UNITS_PER_USD)
        if cost is None:
            if rec.outcome != "rejected":
                k.unpriced(1.0)
            return
        spend_input, spend_cache_read, spend_cache_write, spend_cache_write_1h, spend_output = k.cost
        if cost.input:
            spend_input(cost.input / COST_UNITS_PER_USD)
        if cost.cache_read:
            spend_cache_read(cost.cache_read / COST_UNITS_PER_USD)
        if cost.cache_write:
            spend_cache_write(cost.cache_write / COST_UNITS_PER_USD)
        if cost.cache_write_1h:
            spend_cache_write_1h(cost.cache_write_1h / COST_UNITS_PER_USD)
        if cost.output:
            spend_output(cost.output / COST_UNITS_PER_USD)
        if cost.web_search:
            fee, spend_fee = k.web_search
            fee(cost.web_search / COST_UNITS_PER_USD)
            spend_fee(cost.web_search / COST_UNITS_PER_USD)
        total = cost.total
        k.tagged_cost(total / COST_UNITS_PER_USD)
        if provider is not None:
            k.provider_costed(total / COST_UNITS_PER_USD)

    def refused(self, reason: str, endpoint: str, duration_s: float) -> None:
        """Counts one refusal before a key was known, on the event loop: in llmmeter_refusals_total,
        and in llmmeter_requests_total as any refused request is, though its ledger record is one
        per minute and reason (proxy/metering/refusals.py)."""
        self._refusals[reason].inc()
        raw = (None, None, UNAUTHENTICATED, "", endpoint, None, None, 401, "rejected")
        k = self._keys.get(raw)
        if k is None:
            k = self._prepare(raw)
        k.request(1.0)
        k.duration(duration_s)
        k.overhead(0.0)

    def _prepare(self, raw: tuple[str | int | None, ...]) -> _Keys:
        """The series one combination of record values updates, looked up once (bounded: tier and
        code come from clients)."""
        model_v, tier_v, tenant_v, upstream_v, endpoint_v, tag_v, workload_v, code_v, outcome_v = raw
        lb = self.labels
        model = lb.pick(_str(model_v), lb.models)
        tier = lb.pick(_str(tier_v), lb.tiers) if tier_v else OTHER
        tenant = lb.pick(_str(tenant_v), lb.tenants)
        endpoint = endpoint_v if isinstance(endpoint_v, str) and endpoint_v in ENDPOINTS else OTHER
        upstream = lb.pick(_str(upstream_v), lb.upstreams)
        kinds = BILLING_TYPES  # input, cache_read, cache_write, cache_write_1h, output
        k = _Keys(
            request=self.requests.adder((upstream, endpoint, model, tier, tenant, str(code_v), str(outcome_v))),
            duration=self.duration.observer((endpoint, model)),
            overhead=self.overhead.observer((endpoint,)),
            ttft=self.ttft.observer((model, tier)),
            metered=endpoint not in ("models", "other"),
            # Served as they came (not batch results, not refusals): the report's load_by_minute set.
            live=endpoint in METERED and outcome_v != "rejected",
            load=(self.in_flight.adder((model,)), self.prefill.adder((model,)), self.decode.adder((model,)),
                  self.kv.adder((model,))),
            tokens=tuple(self.tokens.adder((model, tier, tenant, kind)) for kind in kinds),
            reasoning=self.reasoning.adder((model, tier, tenant)),
            estimated=self.estimated.adder((model,)),
            input_tokens=self.input_tokens.observer((model,)),
            output_tokens=self.output_tokens.observer((model,)),
            unpriced=self.unpriced.adder((model,)),
            cost=tuple(self.cost.adder((model, tier, tenant, kind)) for kind in kinds),
            web_search=(self.fees.adder((model, tenant, "web_search")),
                        self.cost.adder((model, tier, tenant, "web_search"))),
            provider_cost=self.provider_cost.adder((model, tenant)),
            provider_costed=self.provider_costed.adder((model, tenant)),
            tagged_cost=self.tagged_cost.adder((lb.pick(_str(tag_v), lb.tags), _str(workload_v) or OTHER)),
        )
        if len(self._keys) >= 4096:
            self._keys.clear()
        self._keys[raw] = k
        return k


def _str(v: str | int | None) -> str | None:
    return v if isinstance(v, str) else None


Add = Callable[[float], None]


@dataclass(slots=True, frozen=True)
class _Keys:
    """The series one request's values lead to, as the callables that update them."""

    request: Add
    duration: Add
    overhead: Add
    ttft: Add
    metered: bool
    live: bool
    load: tuple[Add, Add, Add, Add]  # in flight seconds, prefill tokens, decode tokens, KV token-seconds
    tokens: tuple[Add, ...]  # BILLING_TYPES: input, cache_read, cache_write, cache_write_1h, output
    reasoning: Add
    estimated: Add
    input_tokens: Add
    output_tokens: Add
    unpriced: Add
    cost: tuple[Add, ...]  # as tokens
    web_search: tuple[Add, Add]  # FEE_TYPES' one kind: in the fees counter, and in the cost counter
    provider_cost: Add
    provider_costed: Add
    tagged_cost: Add


def _publish_every(interval_s: float, publish: Callable[[], None]) -> None:
    """A daemon thread that keeps a worker's share of a shared gauge current."""

    def run() -> None:
        while True:
            with contextlib.suppress(Exception):  # a failing read must not end the thread
                publish()
            time.sleep(interval_s)

    threading.Thread(target=run, name="llmmeter-metrics-publish", daemon=True).start()


_REJECTED = ("llmmeter_ledger_rejected_records",
             "Ledger records the database refused, set aside as dead letters (llmmeter ledger retry)")
_LOST = ("llmmeter_ledger_lost_records", "Ledger records neither journaled nor held in memory")


class _LedgerCounts(Collector):
    """The ledger's own counters, read at scrape time."""

    def __init__(self, counts: Callable[[], tuple[int, int]]) -> None:
        self.counts = counts

    def collect(self) -> Iterable[CounterMetricFamily]:
        rejected, lost = self.counts()
        yield CounterMetricFamily(*_REJECTED, value=float(rejected))
        yield CounterMetricFamily(*_LOST, value=float(lost))


def _publish_ledger_counts(registry: CollectorRegistry, counts: Callable[[], tuple[int, int]]) -> None:
    """With several workers: each adds what its ledger counted since the last time to shared counters."""
    counters = (Counter(*_REJECTED, registry=registry), Counter(*_LOST, registry=registry))
    published = [0, 0]

    def publish() -> None:
        for i, (counter, n) in enumerate(zip(counters, counts(), strict=True)):
            if n > published[i]:
                counter.inc(n - published[i])
                published[i] = n

    _publish_every(PENDING_EVERY_S, publish)


class _Live(Collector):
    """Gauges computed at scrape time: prices in force, month-to-date spend, backlog."""

    def __init__(self, book: PriceBook, labels: Labels,
                 month_to_date: Callable[[datetime], Mapping[str, int]] | None,
                 pending: Callable[[], int] | None, with_pending: bool = True) -> None:
        self.book, self.lb = book, labels
        self.month_to_date, self.pending, self.with_pending = month_to_date, pending, with_pending
        self._mtd: tuple[float, Mapping[str, int]] = (0.0, {})

    def collect(self) -> Iterable[GaugeMetricFamily]:
        now = datetime.now(UTC)
        price = GaugeMetricFamily("llmmeter_price_per_million_usd", "Prices in force now",
                                  labels=["model", "tier", "type"])
        for p in self.book.in_force(now):
            if p.upstream is None:
                for kind in BILLING_TYPES:
                    value = getattr(p, kind)
                    if value is not None:  # cache_write_1h only where the entry has one
                        price.add_metric([p.model, p.tier, kind], float(value))
        yield price
        if self.with_pending:
            pending = GaugeMetricFamily("llmmeter_ledger_pending_records",
                                        "Records journaled but not yet in the database")
            pending.add_metric([], float(self.pending() if self.pending else 0))
            yield pending
        mtd = GaugeMetricFamily("llmmeter_month_to_date_cost_usd", "Spend this UTC month, from the ledger",
                                labels=["tenant"])
        for tenant, units in self._month_to_date(now).items():
            mtd.add_metric([tenant], float(Decimal(units) / COST_UNITS_PER_USD))
        yield mtd

    def _month_to_date(self, now: datetime) -> Mapping[str, int]:
        # The ledger query scans the month; a 15 s cache keeps scrapes cheap.
        if self.month_to_date is None:
            return {}
        stamp, cached = self._mtd
        if time.monotonic() - stamp < 15:
            return cached
        try:
            raw = self.month_to_date(now)
        except Exception:  # a failing database must not break /metrics
            return cached
        folded: dict[str, int] = {}
        for tenant, units in raw.items():
            key = self.lb.pick(tenant, self.lb.tenants)
            folded[key] = folded.get(key, 0) + units
        folded["all"] = sum(raw.values())
        self._mtd = (time.monotonic(), folded)
        return folded
