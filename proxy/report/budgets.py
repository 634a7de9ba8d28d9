"""The report's `budgets` section (SPEC "Monthly report", version 3): each `[[budget]]` of the
config, every one of its periods that overlaps the report's month.

A budget's periods are days or months of its own time zone, which need not be the report's:
a month budget in São Paulo overlaps a UTC month in two periods. Each period is shown whole
(its spent is the budget's figure, not the month's share of it); periods that have not begun
by the report's `now` are left out. With `--tenant`, only the budgets of that tenant.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from proxy.budget.periods import period_of
from proxy.ledger.store import Store
from proxy.ledger.store.base import SqlStore
from proxy.ledger.store.budget_report import period_sums
from proxy.ledger.store.budgets import Scope, usd_units
from proxy.ledger.store.rows import to_micros
from proxy.report.model import BudgetRow
from proxy.settings import Budget


def periods(budget: Budget, start: datetime, end: datetime, now: datetime) -> list[tuple[datetime, datetime]]:
    """The budget's periods [lo, hi) that overlap [start, end) and have begun by `now`."""
    out: list[tuple[datetime, datetime]] = []
    lo, hi = period_of(budget, start)
    while lo < end and lo <= now:
        out.append((lo, hi))
        lo, hi = period_of(budget, hi)
    return out


def budget_rows(store: Store, budgets: Sequence[Budget], start: datetime, end: datetime, now: datetime,
                tenant: str | None = None) -> tuple[BudgetRow, ...]:
    shown = [b for b in budgets if tenant is None or b.tenant == tenant]
    if not shown:
        return ()
    if not isinstance(store, SqlStore):
        raise TypeError(f"budgets are read from an SQL ledger, not {type(store).__name__}")
    rows = []
    for b in shown:
        for lo, hi in periods(b, start, end, now):
            s = period_sums(store, Scope(b.name, to_micros(lo), to_micros(hi), b.tenant, b.tag))
            rows.append(BudgetRow(b.name, lo, hi, b.tz, b.mode, usd_units(b.limit_usd), s.spent_units,
                                  s.rejected_requests, s.rejected_units, hi <= now))
    return tuple(rows)
