"""The ASGI application: /v1/* goes to the lean relay, the rest to a small FastAPI app.

`create_app` wires everything from settings; nothing is built at import time. The
lifespan owns the upstream clients and the ledger.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from pricing import PriceBook, default_tables_dir, load_dir
from proxy.budget.engine import Budgets
from proxy.budget.metrics import BudgetMetrics
from proxy.budget.reserve import Reserver
from proxy.errors import ConfigError
from proxy.ledger import Ledger
from proxy.ledger.group import GroupCommit
from proxy.ledger.layout import default_replica
from proxy.metering.estimate.estimator import Estimator
from proxy.metering.meter import Meter, Spans
from proxy.metering.refusals import Refusals
from proxy.metrics.listener import MetricsListener
from proxy.metrics.metrics import Metrics
from proxy.relay.handler import Receive, Relay, Scope, Send
from proxy.relay.provenance import BatchFiles
from proxy.report.curve import month_so_far
from proxy.server.protocol import ServerLimits
from proxy.settings import Settings
from proxy.startup import startup_lines, startup_warnings
from proxy.upstream.client import Upstreams
from proxy.upstream.routing import Router

log = logging.getLogger("llmmeter")

@dataclass
class Parts:
    """What a running llmmeter is made of; tests may build their own and inject it."""

    settings: Settings
    book: PriceBook
    ledger: Ledger
    registry: CollectorRegistry
    metrics: Metrics
    budgets: Budgets | None = None


def build_parts(settings: Settings, registry: CollectorRegistry | None = None) -> Parts:
    prices = load_dir(settings.prices_dir or default_tables_dir())
    book = PriceBook(prices, dict(settings.tier_aliases))
    ledger = Ledger(settings.ledger_url, settings.journal_dir, settings.fsync,
                    keep_requests_months=settings.keep_requests_months)
    registry = registry or CollectorRegistry()
    self_hosted = frozenset(u.name for u in settings.upstreams if u.self_hosted)
    metrics = Metrics(settings, book, registry, month_to_date=ledger.month_to_date_cost,
                      pending=lambda: ledger.pending, ledger_counts=lambda: (ledger.rejected, ledger.lost),
                      cost_curve=lambda now: month_so_far(ledger.store, settings.selfhost, self_hosted, now))
    budgets = None
    if settings.budgets:
        budgets = Budgets(settings.budgets, Reserver(book, settings.model_limits), ledger.store,
                          BudgetMetrics(registry), default_replica())
        ledger.settled = budgets.settled  # each import settles the reservations its records carry
    return Parts(settings, book, ledger, registry, metrics, budgets)


class LLMMeter:
    """The ASGI callable uvicorn serves."""

    def __init__(self, parts: Parts) -> None:
        s = parts.settings
        self.parts = parts
        waiting = parts.metrics.pool_waiting
        self.upstreams = Upstreams(s.upstreams, s.connect_timeout_s, s.read_timeout_s,
                                   on_waiting=lambda name, delta: waiting.labels(name).inc(delta),
                                   tenant_share=s.tenant_share)
        self.estimator = Estimator(s.estimate.encoding, s.estimate.per_model, engine=s.estimate.engine)
        self.group = GroupCommit(parts.ledger.append_many)
        self.tracing = _tracing(s, parts.metrics)
        meter = Meter(parts.book, self.estimator, s.workloads, self.group, parts.metrics,
                      frozenset(u.name for u in s.upstreams if u.hidden_output == "from_total"),
                      honoured_tiers={u.name: frozenset(u.honoured_tiers) for u in s.upstreams if u.honoured_tiers},
                      spans=self.tracing)
        self.refusals = Refusals(self.group, parts.metrics)
        self.relay = Relay(s, Router(s.upstreams), self.upstreams, meter, parts.metrics,
                           pending=lambda: parts.ledger.pending, budgets=parts.budgets, refusals=self.refusals,
                           files=BatchFiles(parts.ledger.store))
        # With metrics_bind, /metrics is served only on its own listener (proxy/metrics/listener.py).
        self.admin = _admin_app(parts, serve_metrics=s.metrics_bind is None)
        self.metrics_listener: MetricsListener | None = None
        # What the serving protocol (proxy/server/protocol.py) takes from the app it serves.
        self.server_limits = ServerLimits.from_settings(s)
        # Journals the turn's records before its bytes leave; holds nothing until startup binds the group.
        self.before_send: Callable[[], None] = self.group.commit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http" and scope["path"].startswith("/v1/"):
            await self.relay(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)
        else:
            await self.admin(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                try:
                    # Replaying the journal happens before the first request is served.
                    await asyncio.to_thread(self.parts.ledger.start)
                    loop = asyncio.get_running_loop()
                    self.group.bind(loop)
                    self.refusals.bind(loop)
                    self.relay.loop = loop
                    if self.parts.budgets is not None:
                        self.parts.budgets.start(loop)
                    if (bind := self.parts.settings.metrics_bind) is not None:
                        self.metrics_listener = MetricsListener(_admin_app(self.parts, serve_metrics=True), *bind,
                                                                shared=self.parts.settings.workers > 1,
                                                                limits=self.server_limits)
                        await self.metrics_listener.start()
                    ledger = self.parts.ledger
                    for line in startup_lines(self.parts.settings, self.parts.book, ledger.journal_dir,
                                              foreign=ledger.foreign_waiting):
                        log.info("%s", line)
                    for line in startup_warnings(self.parts.settings):
                        log.warning("%s", line)
                except Exception as e:
                    await send({"type": "lifespan.startup.failed", "message": str(e)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                if self.metrics_listener is not None:
                    await self.metrics_listener.stop()
                if self.parts.budgets is not None:
                    await self.parts.budgets.stop()
                self.upstreams.close()
                self.estimator.close()
                self.refusals.bind(None)
                self.refusals.close()  # the open minute's refusals, before the last records are committed
                self.group.bind(None)
                await asyncio.to_thread(self.parts.ledger.close)
                if self.tracing is not None:
                    await asyncio.to_thread(self.tracing.close)
                await send({"type": "lifespan.shutdown.complete"})
                return


def _tracing(settings: Settings, metrics: Metrics) -> Spans | None:
    """The OpenTelemetry export, when `[otel] endpoint` is set; otherwise no OpenTelemetry
    package is even imported."""
    if not settings.otel.enabled:
        return None
    try:
        from proxy.otel.export import Tracing  # the optional extra llmmeter[otel]
    except ImportError as e:
        raise ConfigError(f"[otel] endpoint is set but the OpenTelemetry SDK cannot be loaded ({e}): "
                          "install it with pip install 'llmmeter[otel]', or remove [otel] endpoint") from None

    return Tracing(settings.otel, settings.upstreams, metrics.otel_dropped_spans.inc)


def create_app(settings: Settings, registry: CollectorRegistry | None = None) -> LLMMeter:
    return LLMMeter(build_parts(settings, registry))


def _admin_app(parts: Parts, serve_metrics: bool) -> FastAPI:
    app = FastAPI(title="llmmeter", docs_url=None, redoc_url=None, openapi_url=None)
    token = parts.settings.metrics_token

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> Response:
        ledger = parts.ledger
        checks: dict[str, Any] = {
            "ledger_writable": ledger.healthy and ledger.journal_ok,
            "price_tables_loaded": bool(parts.book.models),
            "pending_records": ledger.pending,
            "rejected_records": ledger.rejected,  # set aside as dead letters: counted, never a reason to stop
        }
        if (problem := ledger.problem) is not None:
            checks["ledger_problem"] = problem  # why not writable: e.g. the ledger file was removed or replaced
        ready = checks["ledger_writable"] and checks["price_tables_loaded"]
        return JSONResponse({"ready": ready, **checks}, status_code=200 if ready else 503)

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        if not serve_metrics:
            return JSONResponse({"error": {"message": "/metrics is served on server.metrics_bind's address only",
                                           "type": "not_found", "code": "metrics_elsewhere"}}, status_code=404)
        if token is not None:
            auth = request.headers.get("authorization", "")
            if not hmac.compare_digest(auth.encode(), f"Bearer {token}".encode()):
                return JSONResponse({"error": {"message": "metrics token required",
                                               "type": "authentication_error", "code": "invalid_token"}},
                                    status_code=401)
        body = await asyncio.to_thread(generate_latest, parts.registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return app
