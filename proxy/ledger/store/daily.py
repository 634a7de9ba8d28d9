"""The ledger's side of a reconciliation (SPEC "Reconciliation"): sums per UTC day, response
model, tier and upstream over a range, and the records that carry the provider's own cost.

Summed from the requests themselves, not the hourly rollup: providers name the model they
served (`response_model`), which the rollup does not keep. Money is summed in the same two
parts as the report's sums (proxy/ledger/store/rows.py), so nothing overflows or turns float.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from proxy.ledger.record import Record
from proxy.ledger.store.base import SqlStore
from proxy.ledger.store.rows import exact, from_row, money
from proxy.ledger.store.sql import (
    COST_REST,
    COST_USD,
    FEE_REST,
    FEE_USD,
    METERED_SQL,
    PROVIDER_REST,
    PROVIDER_USD,
    SELECT_ROWS,
)

DAY_US = 86_400_000_000
_EPOCH_DAY = date(1970, 1, 1)

DAILY_SQL = f"""
SELECT start / {DAY_US} AS day,
       COALESCE(response_model, model_requested, '') AS model, COALESCE(tier, '') AS tier, upstream,
       COUNT(*) AS requests,
       SUM(input_tokens) AS input_tokens, SUM(cache_read_tokens) AS cache_read_tokens,
       SUM(cache_write_tokens) AS cache_write_tokens, SUM(cache_write_1h_tokens) AS cache_write_1h_tokens,
       SUM(output_tokens) AS output_tokens,
       SUM(CASE WHEN usage_source = 'estimated' THEN 1 ELSE 0 END) AS estimated,
       SUM(CASE WHEN cost_units IS NULL AND outcome != 'rejected' THEN 1 ELSE 0 END) AS unpriced,
       COALESCE(SUM({COST_USD}), 0) AS cost_usd, COALESCE(SUM({COST_REST}), 0) AS cost_rest,
       COALESCE(SUM({FEE_USD}), 0) AS fee_usd, COALESCE(SUM({FEE_REST}), 0) AS fee_rest,
       COALESCE(SUM({PROVIDER_USD}), 0) AS provider_cost_usd, COALESCE(SUM({PROVIDER_REST}), 0) AS provider_cost_rest,
       COUNT(provider_cost_units) AS provider_costed,
       CASE WHEN endpoint = 'embeddings' THEN 1 ELSE 0 END AS embeddings
FROM requests WHERE {{where}} AND endpoint IN ({METERED_SQL})
GROUP BY 1, 2, 3, 4, CASE WHEN endpoint = 'embeddings' THEN 1 ELSE 0 END
"""


@dataclass(frozen=True, slots=True)
class DailyRow:
    """Billed requests of one UTC day, response model, tier and upstream."""

    day: date
    model: str  # the model the upstream named, else the one requested, else ""
    tier: str
    upstream: str
    requests: int
    input_tokens: int  # uncached input
    cache_read_tokens: int
    cache_write_tokens: int  # 5-minute writes
    cache_write_1h_tokens: int
    output_tokens: int
    estimated: int  # requests whose usage was estimated
    unpriced: int  # requests with no price
    cost_units: int  # 10^-10 USD, exact (fees included)
    fee_units: int  # the fees inside cost_units
    provider_cost_units: int  # the upstream's own figure, over provider_costed requests
    provider_costed: int
    embeddings: bool = False  # embeddings requests (OpenAI reports them apart from completions)


def daily_sums(store: SqlStore, start_from: datetime, start_to: datetime) -> list[DailyRow]:
    """Sums per UTC day × response model × tier × upstream of billed requests in [from, to)."""
    where, params = store._scan(start_from, start_to, None)
    out = []
    for row in store._read(DAILY_SQL.format(where=where), params):
        out.append(DailyRow(
            day=_EPOCH_DAY + timedelta(days=exact(row["day"])), model=row["model"], tier=row["tier"],
            upstream=row["upstream"], requests=exact(row["requests"]), input_tokens=exact(row["input_tokens"]),
            cache_read_tokens=exact(row["cache_read_tokens"]), cache_write_tokens=exact(row["cache_write_tokens"]),
            cache_write_1h_tokens=exact(row["cache_write_1h_tokens"]), output_tokens=exact(row["output_tokens"]),
            estimated=exact(row["estimated"]), unpriced=exact(row["unpriced"]),
            cost_units=money(row["cost_usd"], row["cost_rest"]), fee_units=money(row["fee_usd"], row["fee_rest"]),
            provider_cost_units=money(row["provider_cost_usd"], row["provider_cost_rest"]),
            provider_costed=exact(row["provider_costed"]), embeddings=bool(row["embeddings"])))
    return out


def provider_costed(store: SqlStore, start_from: datetime, start_to: datetime) -> Iterator[Record]:
    """Records in [from, to) that carry the provider's own cost, ordered by (start, id), streamed."""
    where, params = store._range(start_from, start_to, None)
    sql = SELECT_ROWS.format(where=f"{where} AND provider_cost_units IS NOT NULL", id=store.id_order)
    for row in store._stream(sql, params):
        yield from_row(row)
