"""OpenAI's completions usage leaves embeddings out, its daily dollars keep them: so does the comparison."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from proxy.ledger.store.daily import DailyRow
from proxy.reconcile.compare import compare
from proxy.reconcile.model import Counts, ProviderData, Reconciliation
from proxy.settings import RECONCILE_DEFAULTS

DAY = date(2026, 11, 3)


def row(model: str, tokens: int, cost_units: int, embeddings: bool) -> DailyRow:
    return DailyRow(DAY, model, "standard", "openai", 1, tokens, 0, 0, 0, 0, 0, 0, cost_units, 0, 0, 0, embeddings)


def test_embeddings_tokens_are_not_compared_with_completions_usage_but_their_cost_is() -> None:
    data = ProviderData("openai", has_tier=True, has_usage=True, has_cost=True, day_usd_is_total=True)
    data.usage[(DAY, "gpt-5.1", "standard")] = Counts(1000, 0, 0, 0)
    data.day_usd[DAY] = Decimal("0.0013")  # the completion's $0.00125 and the embedding's $0.00005
    rec = Reconciliation("2026-11", "openai", Decimal(1))
    compare(data, [row("gpt-5.1", 1000, 12_500_000, False), row("text-embedding-3-small", 2500, 500_000, True)],
            rec, RECONCILE_DEFAULTS["openai"])
    assert {r.model for r in rec.rows if r.scope == "model"} == {"gpt-5.1"}
    assert rec.exceeding == 0
