"""The records the monthly report's `unpriced_estimated` section is about (SPEC "Monthly report").

The hourly rollup counts unpriced and estimated requests but sums their tokens together with
every other request of the same hour and key, so their own tokens and cost are kept apart, in
`uncertain_rollup` (migration 016): those with no price (cost NULL; metered, not refused by a
budget, as the rollup's `unpriced` counts them) or with estimated usage (as its `estimated`
counts them), summed per UTC hour (the price a record would get depends on when it started),
tenant, model, tier and upstream. SQLite's writer adds each batch's, PostgreSQL a statement
trigger; repricing moves a record's sums as it moves its rollup row; a prune leaves them. A
range's part hours (a half-hour zone) are read from the requests, through migration 014's
partial index.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.ledger.store.base import SqlStore
from proxy.ledger.store.rows import HOUR_US, exact, from_micros, money, whole_hours
from proxy.ledger.store.sql import COST_REST, COST_USD
from proxy.ledger.store.uncertain import ESTIMATED, FROM_ROLLUP, UNCERTAIN, UNPRICED

_SQL = f"""
SELECT start / 3600000000 AS hour,
       COALESCE(model, model_requested, '') AS model, CASE WHEN model IS NULL THEN 1 ELSE 0 END AS unpriced_model,
       COALESCE(tier, '') AS tier, upstream,
       CASE WHEN {UNPRICED} THEN 1 ELSE 0 END AS unpriced,
       CASE WHEN {ESTIMATED} THEN 1 ELSE 0 END AS estimated,
       COUNT(*) AS requests,
       SUM(input_tokens) AS input_tokens, SUM(cache_read_tokens) AS cache_read_tokens,
       SUM(cache_write_tokens) AS cache_write_tokens, SUM(cache_write_1h_tokens) AS cache_write_1h_tokens,
       SUM(output_tokens) AS output_tokens, SUM(web_search_calls) AS web_search_calls,
       COALESCE(SUM({COST_USD}), 0) AS cost_usd, COALESCE(SUM({COST_REST}), 0) AS cost_rest
FROM requests WHERE start >= {{m}} AND start < {{m}}{{tenant}} AND {UNCERTAIN}
GROUP BY 1, 2, 3, 4, 5, 6, 7
"""


@dataclass(frozen=True, slots=True)
class UncertainRow:
    """One UTC hour's unpriced or estimated records of one model, tier and upstream."""

    hour: int  # UTC hours since the epoch
    model: str  # the canonical model, else the one requested, else ""
    unpriced_model: bool  # no price-table model was known when the record was written
    tier: str
    upstream: str
    unpriced: bool  # the records have no cost
    estimated: bool  # the records' usage was estimated
    requests: int
    input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cache_write_1h_tokens: int
    output_tokens: int
    web_search_calls: int
    cost_units: int  # 10^-10 USD; 0 for unpriced records

    @property
    def tokens(self) -> int:
        """The five billing categories (reasoning is inside output)."""
        return (self.input_tokens + self.cache_read_tokens + self.cache_write_tokens + self.cache_write_1h_tokens
                + self.output_tokens)


def uncertain_query(store: SqlStore, lo_us: int, hi_us: int, tenant: str | None) -> tuple[str, tuple[object, ...]]:
    """The SQL and parameters that read [lo, hi) from the requests, in the store's dialect."""
    m = store.mark
    # SQLite, which keeps no statistics here, would pick the (tenant, start) index over the month's
    # every request of a tenant; the unary + keeps it on migration 014's few.
    column = "+tenant" if store.dialect == "sqlite" else "tenant"
    sql = _SQL.format(m=m, tenant=f" AND {column} = {m}" if tenant is not None else "")
    return sql, (lo_us, hi_us, *((tenant,) if tenant is not None else ()))


def uncertain_rows(store: SqlStore, lo_us: int, hi_us: int, tenant: str | None = None) -> list[UncertainRow]:
    """The unpriced and estimated records that started in [lo, hi) microseconds, per UTC hour and key:
    whole hours from the rollup, part hours from the requests."""
    if store.histograms_short(from_micros(lo_us), from_micros(hi_us)):
        return []  # a month pruned before migration 016: its deleted rows were never summed here
    first, last = whole_hours(lo_us, hi_us)
    m = store.mark
    only = (f" AND tenant = {m}", (tenant,)) if tenant is not None else ("", ())
    rows = store._read(FROM_ROLLUP.format(m=m, tenant=only[0]), (first // HOUR_US, last // HOUR_US, *only[1]))
    for a, b in ((lo_us, first), (last, hi_us)):
        if a < b:
            rows += store._read(*uncertain_query(store, a, b, tenant))
    return [UncertainRow(
        hour=exact(r["hour"]), model=r["model"], unpriced_model=bool(r["unpriced_model"]), tier=r["tier"],
        upstream=r["upstream"], unpriced=bool(r["unpriced"]), estimated=bool(r["estimated"]),
        requests=exact(r["requests"]), input_tokens=exact(r["input_tokens"]),
        cache_read_tokens=exact(r["cache_read_tokens"]), cache_write_tokens=exact(r["cache_write_tokens"]),
        cache_write_1h_tokens=exact(r["cache_write_1h_tokens"]), output_tokens=exact(r["output_tokens"]),
        web_search_calls=exact(r["web_search_calls"]), cost_units=money(r["cost_usd"], r["cost_rest"]))
        for r in rows]
