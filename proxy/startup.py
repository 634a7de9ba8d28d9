"""What `serve` says it will do, one line each, before the first request (SPEC "Commands"):
where it listens, every upstream, the ledger and its journal, the prices in force, and
whether keys, budgets and a metrics token are on. Nothing secret: URLs lose their
credentials, keys and tokens are named, never shown."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from pricing import PriceBook
from proxy.ledger.adopt import COMMAND as ADOPT_COMMAND
from proxy.settings import Settings, redact_url


def startup_lines(settings: Settings, book: PriceBook, journal_dir: Path, now: datetime | None = None,
                  foreign: int = 0) -> Iterator[str]:
    """`foreign`: journal segments of another ledger waiting in foreign/ (proxy/ledger/adopt.py)."""
    s = settings
    workers = f", {s.workers} workers" if s.workers > 1 else ""
    yield f"listening on http://{s.host}:{s.port}{workers}"
    if s.metrics_bind is not None:
        host, port = s.metrics_bind
        yield f"/metrics on http://{'[' + host + ']' if ':' in host else host}:{port}/metrics only"
    for up in s.upstreams:
        models = ", ".join(up.models) if up.models else "every model no other upstream claims"
        via = f", via {without_credentials(up.proxy)}" if up.proxy and up.proxy != "none" else ""
        anthropic = f" (messages: {without_credentials(up.anthropic_base_url)})" if up.anthropic_base_url else ""
        key = f", key from {up.api_key_env}" if up.api_key_env else ""
        yield f"upstream {up.name}: {without_credentials(up.base_url)}{anthropic}{via} for {models}{key}"
    yield f"ledger {redact_url(s.ledger_url)}, journal in {journal_dir}"
    if foreign:
        yield (f"journal: {foreign} segment(s) of another ledger wait in foreign/, never imported on their own; "
               f"`{ADOPT_COMMAND}` imports them into this ledger")
    prices = book.in_force(now or datetime.now(UTC))
    newest = max((p.effective_from for p in prices), default=None)
    yield (f"prices: {len(prices)} entries in force" +
           (f", newest effective from {newest.date().isoformat()}" if newest else " (none: every call is unpriced)"))
    keyed = sum(1 for t in s.tenants if t.key_sha256)
    alert = (1 if s.monthly_budget_usd else 0) + sum(1 for t in s.tenants if t.monthly_budget_usd)
    alert += sum(1 for b in s.budgets if not b.enforced)
    enforced = [b.name for b in s.budgets if b.enforced]
    shown = ", ".join(part for part in (f"{len(enforced)} enforced ({', '.join(enforced)})" if enforced else "",
                                       f"{alert} alert only" if alert else "") if part)
    yield (f"proxy keys {'required (' + str(keyed) + ' tenants)' if s.keys_required else 'off'}; "
           f"budgets {shown or 'off'}; "
           f"metrics token {'on' if s.metrics_token else 'off'}")
    o = s.otel
    if o.endpoint is not None:  # its headers may hold a collector's key: only their names
        headers = f", headers {', '.join(name for name, _ in o.headers)}" if o.headers else ""
        yield (f"otel: spans and GenAI metrics to {without_credentials(o.endpoint)} as {o.service_name}, "
               f"sampling {o.sample_ratio:g}, queue {o.queue_size}{headers}")


def without_credentials(url: str) -> str:
    """The URL without user:password@ (an egress proxy's or an upstream's)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def startup_warnings(settings: Settings) -> Iterator[str]:
    """What the configuration leaves to chance, one line each, logged as warnings."""
    if not settings.public_url:
        # Every configuration forwards /v1/messages/batches (a request without a model goes to
        # the default upstream), so batch objects with a results_url can always pass.
        yield ("server.public_url is not set: Anthropic batch objects' results_url is relayed as a path "
               "(/v1/messages/batches/{id}/results), which SDKs resolve against the address they use; "
               "set public_url to the address clients reach llmmeter at to name it in full")
