"""The budgets' Prometheus metrics (SPEC "Budgets (enforced)"), label `budget` from the config."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class BudgetMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.limit = Gauge("llmmeter_budget_limit_usd", "Each [[budget]]'s limit per period", ["budget"], registry=r)
        self.spent = Gauge("llmmeter_budget_spent_usd", "Priced cost of the budget's current period, from the "
                           "ledger (the same on every replica)", ["budget"], registry=r)
        self.reserved = Gauge("llmmeter_budget_reserved_usd", "Reservations of this replica's requests in flight",
                              ["budget"], registry=r)
        self.rejections = Counter("llmmeter_budget_rejections", "Requests refused by an enforced budget",
                                  ["budget"], registry=r)
        self.overrun = Counter("llmmeter_budget_overrun_usd", "Cost beyond their reservation of requests that "
                               "exceeded it (server tools, estimates)", ["budget"], registry=r)
        self.alerts = Counter("llmmeter_budget_alerts", "Alert thresholds crossed, one per budget, period and "
                              "threshold", ["budget", "threshold"], registry=r)
