"""Spans and GenAI metrics through the OpenTelemetry SDK and its OTLP/HTTP exporters.

Imported only when `[otel] endpoint` is set: with export off llmmeter loads no OpenTelemetry
package. The relay calls `begin` before it sends a request upstream and the meter calls `end`
once the ledger record is made; `begin` starts two spans in memory, `end` annotates and ends
them, and records the GenAI metrics, once the client's answer is written. Export runs
in the SDK's batch thread from a queue of `queue_size` spans: a collector that is down or slow
fills the queue, the oldest spans are dropped and counted, and the relay never waits.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from proxy.ledger.record import Record
from proxy.metering.meter import Exchange
from proxy.otel.attributes import call_attributes, latest_requested, provider_name, upstream_attributes
from proxy.otel.genai_metrics import GenAIMetrics
from proxy.otel.session import BoundedSession
from proxy.settings import Otel, Upstream

log = logging.getLogger("llmmeter.otel")
TRACE_HEADERS = frozenset({"traceparent", "tracestate"})
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SHUTDOWN_FLUSH_MS = 2000  # at shutdown the queue gets this long to reach a collector, then is dropped


class CountingBatchSpanProcessor(BatchSpanProcessor):
    """The SDK's batch processor, counting each span it drops because its queue is full (the
    SDK drops the oldest one then and only logs it)."""

    def __init__(self, exporter: OTLPSpanExporter, queue_size: int, dropped: Callable[[], None]) -> None:
        super().__init__(exporter, max_queue_size=queue_size, max_export_batch_size=min(512, queue_size))
        self.queue_size, self.dropped = queue_size, dropped

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None and span.context.trace_flags.sampled and self._queued() >= self.queue_size:
            self.dropped()
        super().on_end(span)

    def _queued(self) -> int:
        # The SDK keeps its queue private; the version is pinned (pyproject.toml) and
        # tests/otel checks the count against a collector that is down.
        return len(self._batch_processor._queue)


class Tracing:
    """Starts a call's spans before its request goes upstream and ends them with its record."""

    def __init__(self, settings: Otel, upstreams: tuple[Upstream, ...], dropped: Callable[[], None],
                 env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        self.latest = latest_requested(env)
        assert settings.endpoint is not None
        self.exporter = exporter = OTLPSpanExporter(endpoint=settings.endpoint.rstrip("/") + "/v1/traces",
                                    headers=dict(settings.headers) or None,  # None: OTEL_EXPORTER_OTLP_HEADERS
                                    session=BoundedSession())
        resource = Resource.create({"service.name": settings.service_name})
        self.metrics = GenAIMetrics(settings.endpoint, dict(settings.headers) or None, resource, self.latest)
        self.provider = TracerProvider(resource=resource,
                                       sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)))
        self.provider.add_span_processor(CountingBatchSpanProcessor(exporter, settings.queue_size, dropped))
        self.tracer = self.provider.get_tracer("llmmeter")

        self.propagator = TraceContextTextMapPropagator()
        self.providers = {u.name: u.base_url for u in upstreams}
        self.anthropic = {u.name: u.anthropic_base_url or u.base_url for u in upstreams}
        # The SDK logs a warning for each span dropped, and the exporter one for each retry;
        # llmmeter counts the drops instead. A failed export is still logged (an error, once per batch).
        logging.getLogger("opentelemetry.sdk._shared_internal").setLevel(logging.ERROR)
        logging.getLogger("opentelemetry.exporter.otlp.common.http").setLevel(logging.ERROR)

    def begin(self, ex: Exchange, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """Starts the SERVER span (a child of the client's trace context, if it sent one) and the
        CLIENT span; returns the headers to send upstream, naming the CLIENT span as parent (or,
        should tracing fail, the client's headers as they came: the call goes on untraced)."""
        try:
            return self._begin(ex, headers)
        except Exception:
            log.exception("request %s: its trace spans could not be started", ex.id)
            ex.trace = None
            return headers

    def _begin(self, ex: Exchange, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
        carrier = {k.lower(): v for k, v in headers if k.lower() in TRACE_HEADERS}
        parent: Context = self.propagator.extract(carrier)
        server = self.tracer.start_span(f"llmmeter {ex.endpoint}", context=parent, kind=SpanKind.SERVER,
                                        start_time=_wall_ns(ex.start))
        client = self.tracer.start_span(f"{ex.endpoint} upstream", context=set_span_in_context(server),
                                        kind=SpanKind.CLIENT, start_time=time.time_ns())
        ex.trace = (server, client)
        out: dict[str, str] = {}
        self.propagator.inject(out, context=set_span_in_context(client))
        return [(k, v) for k, v in headers if k.lower() not in TRACE_HEADERS] + list(out.items())

    def end(self, ex: Exchange, rec: Record) -> None:
        """Ends both spans once the loop is done with the current turn, after the client's last
        bytes are written: ending them (the SDK checks and copies each attribute) and the
        metrics cost more than starting them. On the loop, not in a thread: a thread would
        hold the GIL while the loop waits to read the next request. The CLIENT span's end is
        now: its upstream exchange is over."""
        spans: Any = ex.trace
        if spans is None:  # never sent upstream (refused, or failed before): no spans
            return
        ex.trace = None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._end(spans[0], spans[1], rec, time.time_ns())
            return
        loop.call_soon(self._end_safely, spans[0], spans[1], rec, time.time_ns())

    def _end_safely(self, server: Span, client: Span, rec: Record, client_end: int) -> None:
        try:
            self._end(server, client, rec, client_end)
        except Exception:  # tracing must never cost the loop a turn's work
            log.exception("request %s: its trace spans could not be ended", rec.id)

    def _end(self, server: Span, client: Span, rec: Record, client_end: int) -> None:
        """Both spans get the record's attributes and end: the SERVER span at the record's
        duration after its start, the CLIENT span when its exchange was over."""
        base = self.anthropic if rec.endpoint == "messages" else self.providers
        provider = _provider(rec.upstream, base)
        self.metrics.record(rec, provider)
        attrs = call_attributes(rec, provider, self.latest)
        name = f"{attrs['gen_ai.operation.name']} {rec.model_requested or rec.response_model or ''}".strip()
        server_end = _wall_ns(rec.start) + rec.duration_ms * 1_000_000
        _finish(client, name, upstream_attributes(rec, attrs), rec.outcome, min(client_end, server_end))
        _finish(server, name, attrs, rec.outcome, server_end)

    def close(self) -> None:
        """Gives what is queued a short while to leave, then stops the export thread. The SDK's
        flush ignores its timeout and retries a collector that is down for as long as the
        exporter's own: it runs in a thread of its own, given _SHUTDOWN_FLUSH_MS."""
        flush = threading.Thread(target=self._flush, name="otel-flush", daemon=True)
        flush.start()
        flush.join(_SHUTDOWN_FLUSH_MS / 1000)
        self.exporter.shutdown()  # type: ignore[no-untyped-call]  # interrupts a retry's back-off, so shutdown does not wait for it
        self.provider.shutdown()
        self.metrics.close()

    def _flush(self) -> None:
        self.provider.force_flush()
        self.metrics.flush()


def _finish(span: Span, name: str, attrs: Mapping[str, Any], outcome: str, end_ns: int) -> None:
    span.update_name(name)
    span.set_attributes(attrs)
    if outcome != "ok":
        span.set_status(Status(StatusCode.ERROR, outcome))
    span.end(end_time=end_ns)


def _provider(upstream: str, base_urls: Mapping[str, str]) -> str:
    return provider_name(upstream, base_urls.get(upstream, "")) if upstream else "unknown"


def _wall_ns(t: datetime) -> int:
    """Integer nanoseconds since the epoch: a float timestamp would lose the microseconds."""
    return (t - _EPOCH) // timedelta(microseconds=1) * 1000
