"""The SQL of migration 016's `uncertain_rollup`: the unpriced and estimated requests' own
sums, per UTC hour, tenant, model, tier and upstream (proxy/ledger/store/unpriced_report.py
reads them). SQLite's writer and PostgreSQL's trigger add each batch's rows with
add_uncertain_sql; repricing takes a record's out and puts them back; the same SQL is, verbatim,
in the migration files."""

from __future__ import annotations

from proxy.ledger.store.sql import COST_REST, COST_USD, METERED_SQL

UNPRICED = f"(cost_units IS NULL AND outcome != 'rejected' AND endpoint IN ({METERED_SQL}))"
ESTIMATED = "(usage_source = 'estimated')"
# The records this section reads; migration 014's partial index holds exactly those, under this
# same condition, so the databases read them through it (a differently written one would scan).
UNCERTAIN = f"({UNPRICED} OR {ESTIMATED})"
UNCERTAIN_KEY = ("hour", "tenant", "model", "unpriced_model", "tier", "upstream", "unpriced", "estimated")
UNCERTAIN_SUMS = ("input_tokens", "cache_read_tokens", "cache_write_tokens", "cache_write_1h_tokens", "output_tokens",
                  "web_search_calls", "cost_usd", "cost_rest")


def uncertain_values(source: str, where: str) -> str:
    """One row per uncertain record of `source` matching `where`: its key and what it adds."""
    return (f"SELECT start / 3600000000 AS hour, tenant, COALESCE(model, model_requested, '') AS model, "
            f"CASE WHEN model IS NULL THEN 1 ELSE 0 END AS unpriced_model, COALESCE(tier, '') AS tier, upstream, "
            f"CASE WHEN {UNPRICED} THEN 1 ELSE 0 END AS unpriced, "
            f"CASE WHEN {ESTIMATED} THEN 1 ELSE 0 END AS estimated, "
            f"input_tokens, cache_read_tokens, cache_write_tokens, cache_write_1h_tokens, output_tokens, "
            f"web_search_calls, COALESCE({COST_USD}, 0) AS cost_usd, COALESCE({COST_REST}, 0) AS cost_rest "
            f"FROM {source} WHERE {where} AND {UNCERTAIN}")


def add_uncertain_sql(values: str, sign: str = "") -> str:
    """Upsert uncertain_values into the rollup, in key order; `sign` "-" takes them out instead."""
    key = ", ".join(UNCERTAIN_KEY)
    order = ", ".join(str(i + 1) for i in range(len(UNCERTAIN_KEY)))
    sums = ", ".join(f"{sign}SUM({c})" for c in UNCERTAIN_SUMS)
    update = ", ".join(f"{c} = uncertain_rollup.{c} + excluded.{c}" for c in ("requests", *UNCERTAIN_SUMS))
    return (f"INSERT INTO uncertain_rollup ({key}, requests, {', '.join(UNCERTAIN_SUMS)}) "
            f"SELECT {key}, {sign}COUNT(*), {sums} FROM ({values}) AS v WHERE true GROUP BY {order} ORDER BY {order} "
            f"ON CONFLICT ({key}) DO UPDATE SET {update}")


# The report's read of whole hours, over every tenant or one.
FROM_ROLLUP = f"""
SELECT hour, model, unpriced_model, tier, upstream, unpriced, estimated, SUM(requests) AS requests,
       SUM(input_tokens) AS input_tokens, SUM(cache_read_tokens) AS cache_read_tokens,
       SUM(cache_write_tokens) AS cache_write_tokens, SUM(cache_write_1h_tokens) AS cache_write_1h_tokens,
       SUM(output_tokens) AS output_tokens, SUM(web_search_calls) AS web_search_calls,
       SUM(cost_usd) AS cost_usd, SUM(cost_rest) AS cost_rest
FROM uncertain_rollup WHERE hour >= {{m}} AND hour < {{m}}{{tenant}} AND requests > 0
GROUP BY {", ".join(k for k in UNCERTAIN_KEY if k != "tenant")}
"""
