"""The hot path: one raw-ASGI handler for every /v1/* request.

Flow: read the client's body (bounded) -> authenticate -> pick the upstream -> forward
-> relay the answer chunk by chunk while a sans-io tap reads usage -> journal the record
before the last bytes go out (SPEC "Ledger"). A raw ASGI callable instead of a framework
route keeps the per-request cost near the bare relay's.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import math
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from datetime import UTC, datetime
from typing import Any

import orjson

from proxy.budget.counts import unreadable
from proxy.budget.engine import BUDGET_EXCEEDED, Budgets, Rejection
from proxy.errors import error_body
from proxy.metering.meter import Exchange, Meter, bounded, clean_tag
from proxy.metering.refusals import Refusals
from proxy.metrics.metrics import Metrics
from proxy.protocol.names import CHAT_STYLE, METERED, MISSING_KEY, UNKNOWN_KEY
from proxy.protocol.request_body import read_request
from proxy.protocol.usage import Observed
from proxy.relay.forward import Forwarder, Outbound, paced, send_whole
from proxy.relay.provenance import BatchFiles
from proxy.relay.route import Route, Routes
from proxy.server import DISCONNECT
from proxy.settings import Settings, Upstream
from proxy.upstream.client import Upstreams
from proxy.upstream.routing import Router, request_headers, target_url

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]



class _TooLarge(Exception):
    pass


class Relay:
    def __init__(self, settings: Settings, router: Router, upstreams: Upstreams, meter: Meter,
                 metrics: Metrics, pending: Callable[[], int] | None = None, budgets: Budgets | None = None,
                 refusals: Refusals | None = None, files: BatchFiles | None = None) -> None:
        self.settings, self.router, self.upstreams = settings, router, upstreams
        # Refusals before a key is known: one ledger record per minute and reason, not per request.
        self.refusals = refusals if refusals is not None else Refusals(meter.journal, metrics)
        # Which files are batch output (None: no ledger to ask, only the upstream's file objects).
        self.files = files if files is not None else BatchFiles(None)
        # Enforced budgets gate metered requests before they are forwarded (None: none is enforced).
        self.budgets = budgets if budgets is not None and budgets.enforced else None
        self.meter, self.metrics = meter, metrics
        # `pending`: the ledger's backlog, which a batch download waits on (proxy/relay/batch.py).
        self.forwarder = Forwarder(meter, metrics, settings.max_decompressed_mb * 1024 * 1024, pending)
        self.max_body = settings.max_body_mb * 1024 * 1024
        # sha256(key) hex -> tenant; compared with hmac.compare_digest below.
        self.keys = [(h, t.name) for t in settings.tenants for h in t.key_sha256]
        self.tenant_names = frozenset(t.name for t in settings.tenants)
        # Set at start-up: asyncio.current_task() without a loop costs a getpid() on Python 3.11.
        self.loop: asyncio.AbstractEventLoop | None = None
        self.routes = Routes()  # what each spelling of a path means, read once

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        t0 = time.perf_counter()
        method: str = scope["method"]
        route = self.routes(method, scope.get("raw_path") or scope["path"].encode(), scope["path"])
        path, endpoint = route.path, route.endpoint
        anthropic = (path or "").startswith("/v1/messages")  # /v1/messages/count_tokens too
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        ex = Exchange(start=datetime.now(UTC), t0=t0, endpoint=endpoint, tenant="default")
        ex.tag = clean_tag(_header(headers, b"x-llmmeter-tag"))

        tenant = self._authenticate(headers)
        if tenant is None:
            await self._unauthenticated(ex, headers, send, anthropic)
            return
        ex.tenant = tenant
        if path is None:
            await self._reject(ex, send, 400, "invalid path", "invalid_path",
                               "invalid_request_error", anthropic)
            return
        try:
            body = await _read_body(receive, headers, self.max_body)
        except _TooLarge:
            await self._reject(ex, send, 413, f"request body is larger than {self.settings.max_body_mb} MB "
                               "(server.max_body_mb)", "request_too_large", "request_too_large", anthropic,
                               "invalid_request_error")
            return
        if body is None:  # the client left while sending its body
            ex.outcome = "client_closed"
            self.meter.record(ex, Observed(), None, "upstream")
            return

        if endpoint in METERED:
            problem = await self._read_request(ex, body)
            if problem:
                await self._reject(ex, send, 400, problem, "invalid_json", "invalid_request_error", anthropic)
                return
        up = self.router.route(ex.model_requested)
        if up is None:
            await self._reject(ex, send, 404, f"The model `{ex.model_requested}` does not exist or is not "
                               "served by this proxy", "model_not_found", "invalid_request_error",
                               anthropic, "not_found_error")
            return
        ex.upstream, ex.self_hosted = up.name, up.self_hosted
        if self.budgets is not None and endpoint in METERED:
            field = unreadable(ex.request) if self.budgets.matching(ex.tenant, ex.tag) else None
            if field is not None:  # no reservation can bound it: refused, not guessed (proxy/budget/counts.py)
                await self._reject(ex, send, 400, f"`{field}` must be a number: an enforced budget cannot bound "
                                   "this request's output", "unreadable_count", "invalid_request_error", anthropic)
                return
            admitted = await self.budgets.admit(ex.tenant, ex.tag, ex.model_requested, ex.tier_requested, up.name,
                                                ex.request, len(body), ex.start)
            if isinstance(admitted, Rejection):
                await self._refuse(ex, send, admitted, anthropic)
                return
            ex.reserved_units, ex.budget_leases = admitted
            try:
                await self._send_on(ex, up, method, route, anthropic, headers, body, scope, receive, send)
            except BaseException:
                # Whatever failed before a record was made, the reservation must not stay held.
                if not ex.recorded:
                    self.budgets.release(ex.reserved_units, ex.budget_leases)
                raise
            return
        await self._send_on(ex, up, method, route, anthropic, headers, body, scope, receive, send)

    async def _send_on(self, ex: Exchange, up: Upstream, method: str, route: Route, anthropic: bool,
                       headers: list[tuple[bytes, bytes]], body: bytes, scope: Scope, receive: Receive,
                       send: Send) -> None:
        path, endpoint = route.path, route.endpoint
        assert path is not None  # a refused path never gets here
        drop_usage_only = False
        if ex.stream and endpoint in CHAT_STYLE and up.inject_include_usage:
            inject = _splice_include_usage if ex.request_skimmed else _inject_include_usage
            body, drop_usage_only = inject(ex.request, body)

        # Batch results are metered line by line; a batch object's results_url is made to name llmmeter,
        # and the output files an OpenAI batch object names are kept, as is the tenant that created a
        # batch: its results are that tenant's, whoever downloads them (proxy/relay/provenance.py).
        # Without public_url results_url becomes a bare path ("" + /v1/...): an SDK that followed the
        # provider's URL would carry the tenant's proxy key to the provider's host, unmetered.
        download = route.download
        public_url = (self.settings.public_url or "") if route.names_results_url else None
        creates = route.creates
        output_files = route.output_files or creates is not None
        read = endpoint in METERED or download is not None or public_url is not None or output_files
        out_headers = request_headers(headers, up, metered=read, anthropic=anthropic,
                                      strip_client_auth=bool(self.keys))
        if download is not None:  # a part of a result file is no lines to meter: the whole file, always
            out_headers = [(k, v) for k, v in out_headers if k.lower() not in ("range", "if-range")]
            # Only a batch's own output is read as results: a tenant's upload is relayed unread.
            download = await self.files.checked(download, up.name, self.upstreams[up.name],
                                                target_url(up, f"/v1/files/{download.source_id}", b""), out_headers)
        url = target_url(up, path, scope.get("query_string", b""))
        out = Outbound(self.upstreams[up.name], method, url, out_headers, body, drop_usage_only, anthropic,
                       download, public_url, self.files if output_files else None, creates)
        await self._forward(ex, out, scope, receive, send)

    async def _forward(self, ex: Exchange, out: Outbound, scope: Scope, receive: Receive, send: Send) -> None:
        """Forward while watching for the client to leave: if it does, the forwarding task is
        cancelled, the upstream connection dropped, and the record says client_closed."""
        gone = _Departure(asyncio.current_task(self.loop))
        watch = (scope.get("extensions") or {}).get(DISCONNECT)
        watcher: asyncio.Task[None] | None = None
        if watch is not None:
            watch(gone)
        else:  # another server than ours: wait in receive() for the client to leave
            watcher = asyncio.create_task(_watch_disconnect(receive, gone))
        try:
            await self.forwarder.run(ex, out, send)
        except asyncio.CancelledError:
            if not gone.happened or gone.task is None:
                raise
            gone.task.uncancel()  # we cancelled ourselves because the client left
        finally:
            if watcher is not None:
                watcher.cancel()
            elif watch is not None:
                watch(None)

    def _authenticate(self, headers: list[tuple[bytes, bytes]]) -> str | None:
        if not self.keys:
            name = clean_tag(_header(headers, b"x-llmmeter-tenant"))  # SPEC "Tenants": cleaned as tags are
            return name or "default"
        presented = _presented_key(headers)
        if presented is None:
            return None
        digest = hashlib.sha256(presented.encode()).hexdigest()
        found = None
        for h, tenant in self.keys:  # no early exit: the time does not depend on the match
            if hmac.compare_digest(h, digest):
                found = tenant
        return found

    async def _read_request(self, ex: Exchange, body: bytes) -> str | None:
        try:
            req, ex.request_skimmed = await paced(read_request(body))
        except ValueError as e:
            return str(e)
        ex.request, ex.request_bytes = req, len(body)
        model = req.get("model")
        ex.model_requested = bounded(model) if isinstance(model, str) else None
        ex.stream = req.get("stream") is True
        tier = req.get("service_tier") or req.get("speed")
        ex.tier_requested = tier[:32] if isinstance(tier, str) else None
        meta = req.get("metadata")
        ex.end_user = bounded(req.get("user")) or (bounded(meta.get("user_id")) if isinstance(meta, dict) else None)
        return None

    async def _refuse(self, ex: Exchange, send: Send, no: Rejection, anthropic: bool) -> None:
        """429 `budget_exceeded` in the API's error shape, naming the budget and its period's end; the
        SDKs' own retries are told not to try again before the period ends (SPEC "Budgets (enforced)")."""
        status, code = (503, "budget_unavailable") if no.reason == "unavailable" else (429, "budget_exceeded")
        end = no.period_end.isoformat().replace("+00:00", "Z")
        if anthropic:
            kind = "api_error" if status == 503 else "rate_limit_error"
            body = orjson.dumps({"type": "error", "error": {"type": kind, "message": no.message(), "code": code,
                                                            "budget": no.budget.name, "period_end": end}})
        else:
            body = orjson.dumps({"error": {"message": no.message(), "type": code, "code": code,
                                           "budget": no.budget.name, "period_end": end}})
        if status == 503:  # the ledger's database is away for a moment: retrying soon is right
            headers = [(b"retry-after", b"10")]
        else:
            wait = max(1, math.ceil((no.period_end - datetime.now(UTC)).total_seconds()))
            headers = [(b"x-should-retry", b"false"), (b"retry-after", str(wait).encode())]
        ex.code, ex.outcome = status, "rejected"
        ex.budget, ex.reserved_units = no.budget.name, no.reserved
        ex.flags = (BUDGET_EXCEEDED,)
        # Recorded first: the record is journaled before the answer's bytes leave (SPEC "Ledger").
        self.meter.record(ex, Observed(), None, "upstream")
        await send_whole(send, status, body, headers)

    async def _unauthenticated(self, ex: Exchange, headers: list[tuple[bytes, bytes]], send: Send,
                               anthropic: bool) -> None:
        """401 without a ledger row of its own: counted now, written once per minute and reason
        (proxy/metering/refusals.py), so a keyless flood cannot fill the disk."""
        reason = MISSING_KEY if _presented_key(headers) is None else UNKNOWN_KEY
        self.refusals.refuse(reason, ex.endpoint, time.perf_counter() - ex.t0)
        # Both dialects name a bad key `authentication_error` (Anthropic's own 401 does; SDKs map it).
        body = error_body("missing or unknown proxy key", "authentication_error", "invalid_api_key", anthropic)
        await send_whole(send, 401, body)

    async def _reject(self, ex: Exchange, send: Send, status: int, message: str, code: str, kind: str,
                      anthropic: bool, anthropic_kind: str | None = None) -> None:
        body = error_body(message, anthropic_kind or kind if anthropic else kind, code, anthropic)
        ex.code, ex.outcome = status, "rejected"
        self.meter.record(ex, Observed(), None, "upstream")  # journaled before the answer leaves
        await send_whole(send, status, body)


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for k, v in headers:
        if k == name:
            return v.decode("latin-1")
    return None


def _presented_key(headers: list[tuple[bytes, bytes]]) -> str | None:
    auth = _header(headers, b"authorization")
    if auth and auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    return _header(headers, b"x-api-key") or None


async def _read_body(receive: Receive, headers: list[tuple[bytes, bytes]], limit: int) -> bytes | None:
    declared = _header(headers, b"content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise _TooLarge
    chunks: list[bytes] = []
    size = 0
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return None
        part = msg.get("body", b"")
        size += len(part)
        if size > limit:
            raise _TooLarge
        chunks.append(part)
        if not msg.get("more_body"):
            return b"".join(chunks)


class _Departure:
    """Called when the client leaves mid-relay: cancels the relaying task, and remembers why."""

    __slots__ = ("happened", "task")

    def __init__(self, task: asyncio.Task[Any] | None) -> None:
        self.task, self.happened = task, False

    def __call__(self) -> None:
        if self.task is not None and not self.happened:
            self.happened = True
            self.task.cancel()


async def _watch_disconnect(receive: Receive, gone: _Departure) -> None:
    """After the body is read, the next ASGI message can only be the client leaving."""
    msg = await receive()
    if msg["type"] == "http.disconnect":
        gone()


def _inject_include_usage(req: Any, body: bytes) -> tuple[bytes, bool]:
    """Ask for the usage chunk when the client did not; it is then dropped on the way back."""
    opts = req.get("stream_options")
    if isinstance(opts, dict) and opts.get("include_usage") is True:
        return body, False
    new = dict(req)
    new["stream_options"] = {**(opts if isinstance(opts, dict) else {}), "include_usage": True}
    try:
        return orjson.dumps(new), True
    except orjson.JSONEncodeError:  # nested deeper than orjson writes (it reads deeper): sent as it came
        return body, False


_OPENING = re.compile(rb"\s*\{\s*(\})?")


def _splice_include_usage(req: dict[str, Any], body: bytes) -> tuple[bytes, bool]:
    """_inject_include_usage for a skimmed body, which is never rebuilt whole: the member goes in
    at the front. A body that has stream_options of its own goes as it came (a second member of
    that name would be read differently by different servers); its stream is then estimated."""
    if "stream_options" in req:
        return body, False
    opening = _OPENING.match(body)
    if opening is None or opening.group(1) is not None:
        return body, False
    at = opening.end()
    return body[:at] + b'"stream_options":{"include_usage":true},' + body[at:], True
