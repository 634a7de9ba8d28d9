"""`llmmeter reconcile --month YYYY-MM --against SOURCE` (SPEC "Reconciliation").

    sources.py        the provider's side: its admin API (fetch.py follows the pages) or saved pages
    pages.py          each API's page shape read into ProviderData
    compare.py        llmmeter's daily sums (proxy/ledger/store/daily.py) against it, with explanations
    provider_cost.py  `--against provider_cost`: request by request
    render.py         md, json, csv

Exit 0 when every day-model row is within --threshold-pct, 1 when any is over it; 2 for
what the user gave (a bad month, a missing admin key, a provider that refuses the key or
cannot be reached).
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from proxy import settings as config
from proxy.errors import ConfigError
from proxy.reconcile.fetch import ReconcileError, Transport
from proxy.reconcile.model import ProviderData, Reconciliation
from proxy.reconcile.pages import Month

if TYPE_CHECKING:
    from proxy.export import Output
    from proxy.ledger import Ledger
    from proxy.ledger.store import SqlStore

__all__ = ["ReconcileError", "command", "provider_side", "reconcile"]


def command(args: argparse.Namespace, *, transport: Transport | None = None) -> int:
    from proxy.ledger import Ledger
    from proxy.reconcile.render import render

    month = _month(args.month)
    threshold = args.threshold_pct
    if not isinstance(threshold, Decimal) or not threshold.is_finite() or threshold < 0:
        raise ConfigError(f"--threshold-pct {threshold}: a percentage of 0 or more")
    path = args.config or config.default_config_path()
    s = config.load(path, overrides={"db": args.db} if args.db else {})
    # The provider's side first: a missing or refused key fails before the ledger is opened.
    data = provider_side(s, args.against, month, transport=transport)
    # Read-only: no import, no migration (records still in a journal land with the next `serve`).
    ledger = Ledger(s.ledger_url, s.journal_dir, s.fsync, read_only=True)
    output = _output(args.out, ledger) if args.out is not None else None
    ledger.start()
    try:
        with ledger.store.months_in_use([f"{month.first:%Y-%m}"]):  # `ledger prune` leaves it alone meanwhile
            rec = reconcile(ledger.store, s, args.month, month, data, threshold)
    finally:
        ledger.close()
    text = render(rec, args.format)
    if output is None:
        sys.stdout.write(text)
    else:
        with output.open() as out:
            out.write(text)
    return 1 if rec.exceeding else 0


def provider_side(s: config.Settings, against: str, month: Month, *,
                  transport: Transport | None = None) -> ProviderData | None:
    """The provider's month from its API or saved pages; None for `provider_cost` (it is in the ledger)."""
    from proxy.reconcile.sources import PROVIDERS, fetch, read_saved

    if against in PROVIDERS:
        return fetch(against, s.reconcile[against], month, transport=transport)
    if against == "provider_cost":
        return None
    return read_saved(Path(against), dict(s.reconcile), month, label=against)


def reconcile(store: SqlStore, s: config.Settings, month_name: str, month: Month, data: ProviderData | None,
              threshold: Decimal) -> Reconciliation:
    from proxy.ledger.store.daily import daily_sums, provider_costed
    from proxy.reconcile.compare import compare, ledger_rows
    from proxy.reconcile.provider_cost import compare_requests

    lo = datetime(month.first.year, month.first.month, 1, tzinfo=UTC)
    hi = datetime(month.following.year, month.following.month, 1, tzinfo=UTC)
    if data is None:
        rec = Reconciliation(month_name, "provider_cost", threshold)
        compare_requests(provider_costed(store, lo, hi), rec)
    else:
        rec = Reconciliation(month_name, data.label, threshold)
        source = s.reconcile[data.provider]
        compare(data, ledger_rows(daily_sums(store, lo, hi), source.upstreams), rec, source, dict(s.tier_aliases))
    if hi > datetime.now(UTC):
        rec.notes.append("the month is not over: the provider's report may lag llmmeter's by hours")
    return rec


def _month(name: str) -> Month:
    from proxy.report.build import month_range
    from proxy.times import check_year

    year = name.strip().partition("-")[0]
    if year.isdigit():
        check_year(int(year), f"--month {name!r}")
    lo, hi = month_range(name, ZoneInfo("UTC"))
    return Month(lo.date(), hi.date())


def _output(out: Path, ledger: Ledger) -> Output:
    """`--out`, never the ledger's files or its journal (as `report --out`)."""
    from proxy.export import check_output
    from proxy.ledger.store.sqlite import SqliteStore

    files: list[Path] = []
    if isinstance(ledger.store, SqliteStore):
        db = ledger.store.path
        files = [db, *(db.with_name(db.name + suffix) for suffix in ("-wal", "-shm", "-journal"))]
    return check_output(out, files, ledger.journal_dir)
