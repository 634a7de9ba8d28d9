"""Turns what one exchange told us into a priced, journaled ledger record.

The relay knows bytes; this module knows money. It decides when tokens must be
estimated, resolves model, tier and price entry (SPEC "Price tables"), hands the record
to the ledger's journal (by way of the group commit, which writes it before the client's
last byte leaves) and counts it in the metrics.
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

from pricing import Cost, PriceBook, Resolution
from proxy.budget.unseen import settle as settle_budget
from proxy.ledger.record import Record
from proxy.metering.estimate.calibration import CALIBRATED, Calibration, Key, Overhead
from proxy.metering.estimate.estimator import Estimator
from proxy.metering.tiers import TIER_UNCONFIRMED, TierChoice, choose_tier, priced_usage, settle_tier
from proxy.metrics.metrics import Metrics
from proxy.protocol.names import BATCH, EMPTY_ANSWER, METERED, UPSTREAM_EMPTY
from proxy.protocol.tap import OUTPUT_UNREPORTED
from proxy.protocol.usage import Observed, Usage, settle
from proxy.settings import Workloads

log = logging.getLogger("llmmeter.meter")

PRICING_FAILED = "pricing_failed"  # the price could not be computed: recorded unpriced, relayed as ever
_PRICING_LOG_EVERY = 1000  # a broken price fails every request that uses it: log the first, then every 1000th
_TAG_UNSAFE = re.compile(r"[^A-Za-z0-9_.:/\-]")
MAX_TAG = 64
MAX_FIELD = 256
_CHOICES_KEPT = 4096


class Journal(Protocol):
    def append(self, record: Record) -> None: ...


class Spans(Protocol):
    """Where a call's trace spans are made (proxy/otel/export.py), when export is on."""

    def begin(self, ex: Exchange, headers: list[tuple[str, str]]) -> list[tuple[str, str]]: ...

    def end(self, ex: Exchange, rec: Record) -> None: ...

    def close(self) -> None: ...


def new_id() -> str:
    """Time-ordered ids keep the ledger's primary-key index append-only. The random half
    comes from `random` (seeded from os.urandom, reseeded after fork): uniqueness is all an
    id needs, and os.urandom is a syscall per request."""
    return f"{time.time_ns():016x}{random.getrandbits(64):016x}"


@dataclass(slots=True)
class Exchange:
    """One request in flight: what the relay has learned so far (never any text)."""

    start: datetime
    t0: float  # perf_counter at arrival
    endpoint: str
    tenant: str
    id: str = field(default_factory=new_id)
    stream: bool = False
    upstream: str = ""
    self_hosted: bool = False
    model_requested: str | None = None
    tier_requested: str | None = None
    end_user: str | None = None
    tag: str | None = None
    request: Any = None  # parsed JSON body, kept in memory only for estimating
    request_skimmed: bool = False  # `request` holds only the fields metering reads (proxy/protocol/skim.py)
    request_bytes: int = 0
    code: int = 0
    outcome: str = "ok"
    ttft_s: float | None = None
    upstream_request_id: str | None = None
    overhead_s: float = 0.0
    reserved_units: int | None = None  # an enforced budget's reservation (proxy/budget/engine.py)
    budget_leases: str | None = None  # the leases it came from
    budget: str | None = None  # the budget that refused the request
    flags: tuple[str, ...] = ()  # what the relay knows about the request before any usage
    recorded: bool = False  # its record was made (and carries any reservation to its settlement)
    trace: Any = None  # its spans while it is in flight, when OpenTelemetry export is on (proxy/otel)


def clean_tag(value: str | None) -> str | None:
    if not value:
        return None
    return _TAG_UNSAFE.sub("_", value.strip())[:MAX_TAG] or None


def bounded(value: object) -> str | None:
    return value[:MAX_FIELD] if isinstance(value, str) and value else None


class Meter:
    def __init__(self, book: PriceBook, estimator: Estimator, workloads: Workloads,
                 journal: Journal, metrics: Metrics, from_total: frozenset[str] = frozenset(),
                 calibration: Calibration | None = None,
                 honoured_tiers: Mapping[str, frozenset[str]] | None = None, spans: Spans | None = None) -> None:
        self.book, self.estimator, self.workloads = book, estimator, workloads
        self.spans = spans
        self.journal, self.metrics = journal, metrics
        self.from_total = from_total  # upstreams whose hidden_output is "from_total"
        # upstream -> tiers it honours when a request asks, even when its answer does not say so
        self.honoured_tiers = dict(honoured_tiers or {})
        self.pricing_failures = 0
        self.calibration = calibration or Calibration()
        self._choices: dict[tuple[object, ...], TierChoice] = {}  # _model_and_tier's memo

    def needs_estimate(self, ex: Exchange, observed: Observed) -> bool:
        """Estimate only when tokens were surely spent and the upstream said nothing (or, for output,
        only a placeholder)."""
        if ex.endpoint not in METERED or ex.request is None:
            return False
        if _empty_answer(ex, observed):
            return False  # nothing came back: nothing to count, nothing the client was given
        if observed.usage is not None:
            # Anthropic's message_start output count is a placeholder: a cut stream's output is counted.
            return OUTPUT_UNREPORTED in observed.usage.flags
        if ex.outcome in ("client_closed", "upstream_reset", "upstream_timeout"):
            return ex.code != 0 or ex.outcome == "client_closed"
        return 200 <= ex.code < 300

    async def finish(self, ex: Exchange, observed: Observed,
                     completion_text: Callable[[], str]) -> Record:
        usage, source = observed.usage, "upstream"
        if self.needs_estimate(ex, observed):
            model = observed.model or ex.model_requested
            # Read here, on the loop: the tap that holds the text is the loop's.
            text = "" if ex.endpoint == "embeddings" and observed.usage is None else completion_text()
            # Looked up here, on the loop: the count itself may run in a thread.
            # Learning costs a count of every reported call's prompt (a sample, once the window is
            # full): only for an upstream that answered whole without usage (llama.cpp's streams),
            # not one whose client merely left.
            overhead = (self.calibration.estimated(_key(ex, observed), learn=ex.outcome == "ok")
                        if observed.usage is None else None)
            usage = await self.estimator.settle(model, self._estimate(ex, observed, model, text, overhead))
            source = "estimated"
        return self.record(ex, observed, usage, source)

    async def learn(self, ex: Exchange, observed: Observed) -> None:
        """A call whose upstream reported usage teaches the estimates of its upstream, model and
        endpoint the prompt tokens its template adds (estimate/calibration.py); only for those
        that are estimated at all, and sampled, so a hosted API that always reports costs nothing."""
        u = observed.usage
        if (u is None or ex.endpoint not in _PROMPTED or ex.request is None or ex.request_skimmed
                or not 200 <= ex.code < 300 or OUTPUT_UNREPORTED in u.flags):
            return
        key = _key(ex, observed)
        if not self.calibration.wants(key):
            return
        model = observed.model or ex.model_requested
        counted = await self.estimator.settle(model, self.estimator.prompt_steps(
            ex.endpoint, model, ex.request, self.estimator.tally()))
        reported = u.input_tokens + u.cache_read_tokens + u.cache_write_tokens + u.cache_write_1h_tokens
        self.calibration.learn(key, reported, counted)

    def _estimate(self, ex: Exchange, observed: Observed, model: str | None,
                  text: str, overhead: Overhead | None = None) -> Generator[None, None, Usage]:
        tally = self.estimator.tally()
        # Output first: if the request's budget runs out, the dearer tokens were counted.
        output = yield from self.estimator.text_steps(model, text, tally)
        if observed.usage is not None:  # input reported, output not: count only what was relayed
            u = observed.usage
            return replace(u, output_tokens=max(u.output_tokens, output), flags=(*u.flags, *tally.flags))
        if ex.request_skimmed:  # its text was never built: approximated from its size, and flagged so
            prompt = tally.approximate(ex.request_bytes)
        else:
            prompt = yield from self.estimator.prompt_steps(ex.endpoint, model, ex.request, tally)
        flags = tally.flags
        if overhead is not None:  # the template tokens this upstream adds, learnt from its reports
            prompt, flags = max(0, prompt + overhead.tokens), (*flags, CALIBRATED)
        return Usage(input_tokens=prompt, cache_read_tokens=0, cache_write_tokens=0,
                     output_tokens=output, reasoning_tokens=None, flags=flags)

    def record(self, ex: Exchange, observed: Observed, usage: Usage | None, source: str) -> Record:
        if usage is not None and source == "upstream":
            # The request's cache TTL and the upstream's way with total_tokens (SPEC "Usage extraction").
            usage = settle(usage, ex.request, ex.upstream in self.from_total)
        flags: list[str] = [*ex.flags, *usage.flags] if usage else list(ex.flags)
        flags += [f for f in observed.faults if f not in flags]
        if usage is None and source == "upstream":
            source = "none"  # nothing reported and nothing counted: no tokens, not zero reported ones
        if _empty_answer(ex, observed):
            ex.outcome = UPSTREAM_EMPTY
            flags.append(EMPTY_ANSWER)
        elif usage is None and ex.endpoint in METERED:
            flags.append("no_usage")
        u = usage or Usage(0, 0, 0, 0, None)
        canonical, tier = self._model_and_tier(ex, observed, u, flags)
        rec = Record(
            id=ex.id, start=ex.start, tenant=ex.tenant, endpoint=ex.endpoint, stream=ex.stream,
            code=ex.code, outcome=ex.outcome, upstream=ex.upstream, end_user=ex.end_user,
            model_requested=ex.model_requested, response_model=bounded(observed.model),
            model=canonical, tier=tier,
            input_tokens=u.input_tokens, cache_read_tokens=u.cache_read_tokens,
            cache_write_tokens=u.cache_write_tokens, output_tokens=u.output_tokens,
            reasoning_tokens=u.reasoning_tokens, usage_source=source, flags=flags,
            duration_ms=round((time.perf_counter() - ex.t0) * 1000),
            ttft_ms=None if ex.ttft_s is None else round(ex.ttft_s * 1000),
            tag=ex.tag, upstream_request_id=bounded(ex.upstream_request_id or observed.upstream_request_id),
            cache_write_1h_tokens=u.cache_write_1h_tokens, web_search_calls=u.web_search_calls,
            provider_cost_units=u.provider_cost_units,
            reserved_units=ex.reserved_units, budget_leases=ex.budget_leases, budget=ex.budget,
        )
        priced: Cost | None = None
        if ex.endpoint in METERED:
            rec.workload = self.workloads.classify(rec.input_side_tokens)
            if canonical is not None and tier is not None:
                priced = self._price(rec, canonical, tier, ex, u, observed.inference_geo)
            added = settle_budget(rec)
            if added and priced is not None:
                # /metrics counts what the ledger does: the unseen part as output, what a generation bills.
                priced = replace(priced, output=priced.output + added)
        self.journal.append(rec)
        ex.recorded = True
        self.metrics.observe(rec, priced, ex.overhead_s)
        if ex.trace is not None and self.spans is not None:
            _end_spans(self.spans, ex, rec)
        return rec

    def record_batch(self, ex: Exchange, observed: Observed, flags: tuple[str, ...] = (),
                     observe: bool = True) -> Record:
        """One result of a batch download (SPEC "Batch jobs"): endpoint and tier `batch`, whatever
        tier the line names, priced at the entry in force at `ex.start`; never estimated, never
        gated. `observe` False: this process counted the result in /metrics already (a second
        download, which the ledger's primary key makes a no-op)."""
        usage = observed.usage
        # No request to read a cache TTL from (the batch's input file is not seen); total_tokens as ever.
        u = Usage(0, 0, 0, 0, None) if usage is None else settle(usage, None, ex.upstream in self.from_total)
        rec_flags = [*u.flags, *(f for f in observed.faults if f not in u.flags), *flags]
        try:
            model = self.book.canonical_model(observed.model, ex.model_requested)
        except Exception:
            model = None
            self._pricing_failed(ex, rec_flags)
        rec = Record(
            id=ex.id, start=ex.start, tenant=ex.tenant, endpoint=BATCH, stream=False, code=ex.code,
            outcome=ex.outcome, upstream=ex.upstream, end_user=ex.end_user, model_requested=ex.model_requested,
            response_model=bounded(observed.model), model=model, tier=BATCH,
            input_tokens=u.input_tokens, cache_read_tokens=u.cache_read_tokens,
            cache_write_tokens=u.cache_write_tokens, output_tokens=u.output_tokens,
            reasoning_tokens=u.reasoning_tokens, usage_source="upstream", flags=rec_flags, duration_ms=0,
            tag=ex.tag, upstream_request_id=bounded(ex.upstream_request_id),
            cache_write_1h_tokens=u.cache_write_1h_tokens, web_search_calls=u.web_search_calls,
            provider_cost_units=u.provider_cost_units,
        )
        rec.workload = self.workloads.classify(rec.input_side_tokens)
        priced = self._price(rec, model, BATCH, ex, u, observed.inference_geo) if model is not None else None
        self.journal.append(rec)
        if observe:
            self.metrics.observe(rec, priced, 0.0)
        return rec

    def _model_and_tier(self, ex: Exchange, observed: Observed, u: Usage,
                        flags: list[str]) -> tuple[str | None, str | None]:
        """Steps 1 and 2 of SPEC "Price tables" (proxy/metering/tiers.py: the request's tier only
        where it cannot lower the price, unless confirmed); a failure leaves the record unpriced
        and flagged."""
        try:
            speed = None if observed.speed == "standard" else observed.speed  # Anthropic's "standard": no hint
            book = self.book
            # choose_tier is pure and reads time only through the book's epoch: memoised per request shape.
            key = (ex.endpoint, observed.model, ex.model_requested, speed, observed.service_tier, ex.tier_requested,
                   ex.upstream, book.epoch(ex.start))
            choice = self._choices.get(key)
            if choice is None:
                choice = choose_tier(book, ex.endpoint, observed.model, ex.model_requested,
                                     (speed, observed.service_tier), ex.tier_requested, ex.start,
                                     self.honoured_tiers.get(ex.upstream, frozenset()))
                if len(self._choices) >= _CHOICES_KEPT:  # names and tiers come from clients: bounded
                    self._choices.clear()
                self._choices[key] = choice
            tier, refused = settle_tier(self.book, choice, ex.start, ex.upstream, u, observed.inference_geo)
        except Exception:  # the client's response is on its way: it must not pay for a pricing bug
            self._pricing_failed(ex, flags)
            return None, None
        if refused:
            flags.append(TIER_UNCONFIRMED)
        return choice.model, tier

    def _price(self, rec: Record, model: str, tier: str, ex: Exchange, u: Usage,
               geo: str | None = None) -> Cost | None:
        """Step 3 and the cost (SPEC "Price tables, version 2": one band per request, or per
        iteration of a compacted Anthropic request; fees inside the cost); a failure (a price or
        count the calculator refuses) records the request unpriced, flagged PRICING_FAILED, and
        never reaches the relay."""
        try:
            return price_record(self.book, rec, model, tier, ex.start, ex.upstream, u, geo)
        except Exception:
            self._pricing_failed(ex, rec.flags)
            return None

    def _pricing_failed(self, ex: Exchange, flags: list[str]) -> None:
        if PRICING_FAILED not in flags:
            flags.append(PRICING_FAILED)
        self.pricing_failures += 1
        if self.pricing_failures % _PRICING_LOG_EVERY == 1:
            log.exception("request %s could not be priced (%d so far); recorded unpriced, flagged %s",
                          ex.id, self.pricing_failures, PRICING_FAILED)


_PROMPTED = frozenset({"chat", "completions", "responses", "messages"})  # where a template wraps the prompt


def _end_spans(spans: Spans, ex: Exchange, rec: Record) -> None:
    try:
        spans.end(ex, rec)
    except Exception:  # tracing must never cost a client its answer
        log.exception("request %s: its trace spans could not be ended", ex.id)


def _key(ex: Exchange, observed: Observed) -> Key:
    """Calibration's key: the model the client asked for (the same on its streams and plain calls)."""
    return ex.upstream, ex.model_requested or observed.model or "", ex.endpoint


def _empty_answer(ex: Exchange, observed: Observed) -> bool:
    """A 2xx stream that ended by itself with no event: the upstream answered nothing."""
    return observed.empty and ex.stream and ex.outcome in ("ok", UPSTREAM_EMPTY) and 200 <= ex.code < 300


def model_and_tier(book: PriceBook, endpoint: str, response_model: str | None, requested_model: str | None,
                   hints: Iterable[str | None], at: datetime) -> tuple[str | None, str | None]:
    """Steps 1 and 2 of SPEC "Price tables" from hints that are the answer's word (or a record's
    own tier): the canonical model and the tier they resolve to at `at`; no tier off the metered
    endpoints, always `batch` for a batch result. Pure: `llmmeter reprice`'s resolution
    (proxy/ledger/reprice.py). Raises on a pricing bug."""
    choice = choose_tier(book, endpoint, response_model, requested_model, hints, None, at)
    return choice.model, choice.tier


def price_record(book: PriceBook, rec: Record, model: str, tier: str, at: datetime, upstream: str, u: Usage,
                 geo: str | None = None) -> Cost | None:
    """Step 3 and the cost, written into `rec`: its price entry, band, cost, fees and the flags
    the pricing raised (tier_fallback, geo_unpriced, cache_ttl_unpriced, fee_unpriced). None, and
    `rec` untouched, when no entry is in force at `at`. One band per request, or per compaction
    pass (`u.iterations`); fees inside the cost. Raises what the calculator refuses, before `rec`
    is touched. The meter's pricing, and `llmmeter reprice`'s."""
    got = priced_usage(book, model, tier, at, upstream, u, geo)
    if got is None:
        return None
    priced, found = got
    _priced(rec, found)
    rec.flags += [f for f in priced.flags if f not in rec.flags]
    rec.cost_units, rec.fee_units, rec.price_band = priced.cost.total, priced.cost.fees, priced.band
    return priced.cost


def _priced(rec: Record, found: Resolution) -> None:
    if found.tier_fallback:
        rec.flags.append("tier_fallback")
    if found.geo_unpriced:
        rec.flags.append("geo_unpriced")
    p = found.price
    rec.price_model, rec.price_tier, rec.price_effective_from = p.model, p.tier, p.effective_from


