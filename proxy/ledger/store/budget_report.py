"""A budget's period as the monthly report shows it (SPEC "Monthly report", `budgets`).

Spent is the same sum the enforcing replicas read (proxy/ledger/store/budgets.py: whole hours
from the rollup, the partial ones from the requests), so the report's figure for the current
period is the `llmmeter_budget_spent_usd` gauge's. Rejected requests are those the budget
refused (`outcome = 'rejected'` and `budget` = its name) that started in the period; what they
would have cost is the sum of their reservations, their worst case.
"""

from __future__ import annotations

from dataclasses import dataclass

from pricing.calculator import UNITS_PER_USD
from proxy.ledger.store.base import SqlStore
from proxy.ledger.store.budgets import Scope, standing_sql
from proxy.ledger.store.rows import money

# A reservation is at most 10^18 units, so whole dollars and the units below them sum apart
# without overflowing a BIGINT however many requests were refused.
_RESERVED_USD = f"(reserved_units / {UNITS_PER_USD})"
_RESERVED_REST = f"(reserved_units - reserved_units / {UNITS_PER_USD} * {UNITS_PER_USD})"


@dataclass(frozen=True, slots=True)
class PeriodSums:
    spent_units: int  # the period's priced cost of the requests the budget matches
    rejected_requests: int  # requests the budget refused in the period
    rejected_units: int  # the sum of their reservations (a refused unpriced request has none)


def period_sums(store: SqlStore, scope: Scope) -> PeriodSums:
    """One budget period's spent, and the requests it refused, read in one statement."""
    m = store.mark
    spent_sql, spent_params = standing_sql(scope, m, "", 0)
    refused = f"FROM requests WHERE start >= {m} AND start < {m} AND outcome = 'rejected' AND budget = {m}"
    sql = (f"SELECT s.r_usd, s.r_rest, s.p_usd, s.p_rest,"
           f" (SELECT COUNT(*) {refused}) AS n,"
           f" (SELECT COALESCE(SUM({_RESERVED_USD}), 0) {refused}) AS x_usd,"
           f" (SELECT COALESCE(SUM({_RESERVED_REST}), 0) {refused}) AS x_rest"
           f" FROM ({spent_sql}) s")
    span = (scope.lo_us, scope.hi_us, scope.budget)
    row = store._read(sql, (*span, *span, *span, *spent_params))[0]  # in the order the marks appear
    return PeriodSums(money(row["r_usd"], row["r_rest"]) + money(row["p_usd"], row["p_rest"]),
                      int(row["n"]), money(row["x_usd"], row["x_rest"]))
