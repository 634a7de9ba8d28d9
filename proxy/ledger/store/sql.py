"""The ledger's SQL, written once for SQLite and PostgreSQL alike.

Portable SQL: truth values as CASE 0/1, never summed booleans; no `%`, which psycopg would
take for a parameter. The store fills in `{where}` with its dialect's parameter marks.
Money is summed in two parts that cannot overflow (proxy/ledger/store/rows.py);
HourlyRow.from_sums makes them one exact integer again.
"""

from __future__ import annotations

from pricing.calculator import UNITS_PER_USD
from proxy.ledger.store.rows import CARRY, COLUMNS
from proxy.protocol.names import BILLED

# The report aggregates in the database: one row per UTC hour and attribution key, so
# its memory follows the number of distinct keys, never the number of requests. A row counts
# as the requests it stands for (migration 009: an aggregated refusal stands for many).
METERED_SQL = ", ".join(f"'{endpoint}'" for endpoint in sorted(BILLED))  # names from code, never a client
COST_USD = f"(cost_units / {UNITS_PER_USD} + cost_carry * {CARRY // UNITS_PER_USD})"  # whole dollars
COST_REST = f"(cost_units - cost_units / {UNITS_PER_USD} * {UNITS_PER_USD})"  # the units below a dollar
# Two more money parts (007): fees (a subset of the cost) and the provider's own cost, each at
# most 10^18 units a record, so no carry: whole dollars and the units below one.
FEE_USD = f"(fee_units / {UNITS_PER_USD})"
FEE_REST = f"(fee_units - fee_units / {UNITS_PER_USD} * {UNITS_PER_USD})"
PROVIDER_USD = f"(provider_cost_units / {UNITS_PER_USD})"
PROVIDER_REST = f"(provider_cost_units - provider_cost_units / {UNITS_PER_USD} * {UNITS_PER_USD})"
# The whole input side, 1-hour cache writes included (007).
INPUT_SIDE = "(input_tokens + cache_read_tokens + cache_write_tokens + cache_write_1h_tokens)"
HOURLY_SQL = f"""
SELECT start / 3600000000 AS hour,
       COALESCE(model, model_requested, '') AS model, CASE WHEN model IS NULL THEN 1 ELSE 0 END AS unpriced_model,
       COALESCE(tier, '') AS tier, upstream, tenant, COALESCE(tag, '') AS tag, COALESCE(workload, '') AS workload,
       CASE WHEN endpoint IN ({METERED_SQL}) THEN 1 ELSE 0 END AS metered,
       COALESCE(price_band, 0) AS price_band,
       SUM(request_count) AS requests,
       SUM(input_tokens) AS input_tokens, SUM(cache_read_tokens) AS cache_read_tokens,
       SUM(cache_write_tokens) AS cache_write_tokens, SUM(output_tokens) AS output_tokens,
       COALESCE(SUM(reasoning_tokens), 0) AS reasoning_tokens,
       SUM(CASE WHEN usage_source = 'estimated' THEN 1 ELSE 0 END) AS estimated,
       SUM(CASE WHEN cost_units IS NULL AND outcome != 'rejected' AND endpoint IN ({METERED_SQL}) THEN 1 ELSE 0 END)
           AS unpriced,
       COALESCE(SUM({COST_USD}), 0) AS cost_usd, COALESCE(SUM({COST_REST}), 0) AS cost_rest,
       SUM(cache_write_1h_tokens) AS cache_write_1h_tokens, SUM(web_search_calls) AS web_search_calls,
       COALESCE(SUM({FEE_USD}), 0) AS fee_usd, COALESCE(SUM({FEE_REST}), 0) AS fee_rest,
       COALESCE(SUM({PROVIDER_USD}), 0) AS provider_cost_usd, COALESCE(SUM({PROVIDER_REST}), 0) AS provider_cost_rest,
       COUNT(provider_cost_units) AS provider_costed
FROM requests WHERE {{where}}
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9, 10
"""
# The same rows, by the same names, from the rollup migration 002 keeps (007: the band, fees,
# provider cost): for whole UTC hours.
ROLLUP_SQL = """
SELECT hour, model, unpriced_model, tier, upstream, tenant, tag, workload, metered, price_band, requests,
       input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, reasoning_tokens,
       estimated, unpriced, cost_usd, cost_units AS cost_rest,
       cache_write_1h_tokens, web_search_calls, fee_usd, fee_units AS fee_rest,
       provider_cost_usd, provider_cost_units AS provider_cost_rest, provider_costed
FROM hourly_rollup WHERE {where}
"""
# The rollup's sums grouped by some of its keys, the others read as a constant (store.grouped_rows):
# the report folds a few hundred such rows, not one per hour and key. A rollup row's sums each fit
# a BIGINT, but a month of them might not (SQLite's SUM raises), so each is summed in two parts
# split at GROUP_SPLIT that each fit for 9 x 10^9 rollup rows; Python joins them exactly.
GROUP_KEYS = ("hour", "model", "unpriced_model", "tier", "upstream", "tenant", "tag", "workload", "metered",
              "price_band")
_KEY_CONSTANTS = {"hour": "0", "model": "''", "unpriced_model": "0", "tier": "''", "upstream": "''", "tenant": "''",
                  "tag": "''", "workload": "''", "metered": "0", "price_band": "0"}
GROUP_SUMS = ("requests", "input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens",
              "reasoning_tokens", "estimated", "unpriced", "cost_usd", "cost_units", "cache_write_1h_tokens",
              "web_search_calls", "fee_usd", "fee_units", "provider_cost_usd", "provider_cost_units", "provider_costed")
GROUP_SPLIT = 10**9


def grouped_sql(keys: tuple[str, ...]) -> str:
    """GROUP BY `keys` (names from GROUP_KEYS, never from input) over the rollup, `{where}` left to fill."""
    unknown = [k for k in keys if k not in GROUP_KEYS]
    if unknown or not keys:
        raise ValueError(f"group the rollup by some of {GROUP_KEYS}, not {keys!r}")
    select = ", ".join(k if k in keys else f"{_KEY_CONSTANTS[k]} AS {k}" for k in GROUP_KEYS)
    sums = ", ".join(f"SUM({c} / {GROUP_SPLIT}) AS {c}_hi, SUM({c} - {c} / {GROUP_SPLIT} * {GROUP_SPLIT}) AS {c}_lo"
                     for c in GROUP_SUMS)
    return f"SELECT {select}, {sums} FROM hourly_rollup WHERE {{where}} GROUP BY {', '.join(keys)}"


# Month-to-date spend per tenant from the rollup, per hour: Python adds the hours up.
TENANT_COST_SQL = """
SELECT tenant, hour, SUM(cost_usd) AS cost_usd, SUM(cost_units) AS cost_rest FROM hourly_rollup WHERE {where}
GROUP BY 1, 2
"""
SELECT_ROWS = f"SELECT {', '.join(COLUMNS)} FROM requests WHERE {{where}} ORDER BY start, {{id}}"
MIGRATIONS_TABLE = ("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
                    "name TEXT NOT NULL, applied_at {timestamp})")
# Migration 006: the ledger's own id, which every journal segment written for it names.
LEDGER_ID_SQL = "SELECT value FROM ledger_meta WHERE key = 'ledger_id'"
