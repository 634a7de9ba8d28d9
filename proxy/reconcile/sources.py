"""Where the provider's side comes from: its admin API (openai, anthropic) or saved pages.

Requests as each reference gives them (tests/reconcile/fixtures/README.md): OpenAI takes
repeated plain keys (`group_by=model&group_by=batch`) and Unix seconds; Anthropic takes
`[]` keys (`group_by[]=model`) and RFC 3339 times. Daily buckets, 31 to a page (both APIs'
maximum for `1d`), so a month is one page of each unless the provider splits it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from proxy.errors import ConfigError
from proxy.reconcile.fetch import Client, Params, ReconcileError, Transport, admin_key, decode
from proxy.reconcile.model import ProviderData
from proxy.reconcile.pages import (
    OPENAI_COST,
    OPENAI_USAGE,
    Month,
    anthropic_cost_page,
    anthropic_usage_page,
    finish,
    openai_cost_page,
    openai_usage_page,
)
from proxy.settings import ReconcileSource

ANTHROPIC_VERSION = "2023-06-01"
PROVIDERS = ("openai", "anthropic")
# (page, data, month, source, the page's name in messages)
Reader = Callable[[dict[str, Any], ProviderData, Month, ReconcileSource, str], None]


def fetch(provider: str, source: ReconcileSource, month: Month, *, transport: Transport | None = None,
          environ: dict[str, str] | None = None) -> ProviderData:
    """A month of usage and cost from the provider's admin API."""
    key = admin_key(source.admin_key_env, environ)
    lo = datetime(month.first.year, month.first.month, month.first.day, tzinfo=UTC)
    hi = datetime(month.following.year, month.following.month, month.following.day, tzinfo=UTC)
    if provider == "openai":
        client = Client("openai", source.base_url, {"Authorization": f"Bearer {key}"}, source.admin_key_env, key,
                        transport)
        data = ProviderData("openai", has_tier=True)
        span = [("start_time", str(int(lo.timestamp()))), ("end_time", str(int(hi.timestamp()))),
                ("bucket_width", "1d"), ("limit", "31")]
        usage: Params = [*span, ("group_by", "model"), ("group_by", "service_tier"), ("group_by", "batch"),
                         *(("project_ids", p) for p in source.project_ids),
                         *(("api_key_ids", k) for k in source.api_key_ids)]
        costs: Params = [*span, ("group_by", "line_item"), *(("project_ids", p) for p in source.project_ids)]
        _read(client.pages("/organization/usage/completions", usage), openai_usage_page, data, month, source)
        _read(client.pages("/organization/costs", costs), openai_cost_page, data, month, source)
    else:
        client = Client("anthropic", source.base_url, {"x-api-key": key, "anthropic-version": ANTHROPIC_VERSION},
                        source.admin_key_env, key, transport)
        data = ProviderData("anthropic", has_tier=True)
        span = [("starting_at", _rfc3339(lo)), ("ending_at", _rfc3339(hi)), ("bucket_width", "1d"), ("limit", "31")]
        usage = [*span, ("group_by[]", "model"), ("group_by[]", "service_tier"),
                 *(("api_key_ids[]", k) for k in source.api_key_ids),
                 *(("workspace_ids[]", w) for w in source.workspace_ids)]
        # The cost report filters by nothing: grouped by workspace, the narrowed ones are kept here.
        costs = [*span, ("group_by[]", "description"),
                 *((("group_by[]", "workspace_id"),) if source.workspace_ids else ())]
        _read(client.pages("/organizations/usage_report/messages", usage), anthropic_usage_page, data, month, source)
        _read(client.pages("/organizations/cost_report", costs), anthropic_cost_page, data, month, source)
    data.has_usage = data.has_cost = True
    data.label = provider
    finish(data)
    return data


def _read(pages: Iterator[tuple[str, dict[str, Any]]], reader: Reader, data: ProviderData, month: Month,
          source: ReconcileSource) -> None:
    for name, doc in pages:
        reader(doc, data, month, source, name)


def _rfc3339(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


# --- saved pages ----------------------------------------------------------------------------
def saved_files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.json") if p.is_file())
        if not files:
            raise ConfigError(f"--against {path}: a folder with no .json pages in it")
        return files
    if path.is_file():
        return [path]
    raise ConfigError(f"--against {path}: not openai, anthropic, provider_cost, or an existing file or folder "
                      "of saved API pages")


def saved_pages(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(name, page) for every page in the file or folder: a file holds one page or a list of them
    (named `FILE page N`)."""
    out = []
    for f in saved_files(path):
        try:
            text = f.read_bytes()
        except OSError as e:
            raise ConfigError(f"--against {f}: cannot read: {e.strerror or e}") from None
        doc = decode(text, str(f))
        pages = doc if isinstance(doc, list) else [doc]
        for n, page in enumerate(pages, 1):
            if not isinstance(page, dict):
                raise ReconcileError(f"{f}: not a page of a usage or cost API (a JSON object with `data`)")
            out.append((f"{f} page {n}" if isinstance(doc, list) else str(f), page))
    return out


def recognise(page: dict[str, Any]) -> tuple[str | None, Reader | None]:
    """The provider and reader a page's shape says; (provider, None) for a page with no results."""
    buckets = page.get("data")
    if not isinstance(buckets, list):
        return None, None
    openai = page.get("object") == "page" or any(isinstance(b, dict) and "start_time" in b for b in buckets)
    anthropic = any(isinstance(b, dict) and "starting_at" in b for b in buckets)
    results = [r for b in buckets if isinstance(b, dict)
               for r in (b.get("results") or b.get("result") or []) if isinstance(r, dict)]
    if openai and not anthropic:
        kinds = {r.get("object") for r in results}
        if OPENAI_COST in kinds or any("amount" in r for r in results):
            return "openai", openai_cost_page
        if OPENAI_USAGE in kinds or any("input_tokens" in r for r in results):
            return "openai", openai_usage_page
        return "openai", None
    if anthropic and not openai:
        if any("amount" in r for r in results):
            return "anthropic", anthropic_cost_page
        if any("uncached_input_tokens" in r or "cache_creation" in r for r in results):
            return "anthropic", anthropic_usage_page
        return "anthropic", None
    if not buckets and "has_more" in page:  # an empty page of either: nothing to add
        return "", None
    return None, None


def read_saved(path: Path, sources: dict[str, ReconcileSource], month: Month, label: str = "") -> ProviderData:
    pages = saved_pages(path)
    provider: str | None = None
    kinds: set[Reader] = set()
    for name, page in pages:
        who, reader = recognise(page)
        if who is None:
            raise ReconcileError(f"{name}: not a page of OpenAI's or Anthropic's usage or cost API")
        if who and provider and who != provider:
            raise ReconcileError(f"{path}: pages of both {provider} and {who}; reconcile one provider at a time")
        provider = who or provider
        if reader is not None:
            kinds.add(reader)
    if not provider:
        raise ReconcileError(f"{path}: only empty pages; the provider cannot be told from them")
    data = ProviderData(provider, has_tier=True)
    source = sources[provider]
    for name, page in pages:
        _, reader = recognise(page)
        if reader is not None:
            reader(page, data, month, source, name)
    data.has_usage = bool(kinds & {openai_usage_page, anthropic_usage_page})
    data.has_cost = bool(kinds & {openai_cost_page, anthropic_cost_page})
    if provider == "openai" and data.has_cost:
        data.day_usd_is_total = True
    data.label = f"{provider} (saved pages {label or path})"
    finish(data)
    return data


def first_day(month: str) -> date:
    return datetime.strptime(month, "%Y-%m").date()
