"""The ledger's hourly rows (one per UTC hour and attribution key) as the report adds them up."""

from __future__ import annotations

from collections.abc import Iterable

from proxy.ledger.store import HourlyRow
from proxy.report.model import Usage


def usage(row: HourlyRow) -> Usage:
    return Usage(row.requests, row.input_tokens, row.cache_read_tokens, row.cache_write_tokens, row.output_tokens,
                 row.reasoning_tokens, row.cost_units, row.cache_write_1h_tokens, row.web_search_calls,
                 row.fee_units, row.provider_cost_units, row.provider_costed, row.unpriced)


def total(rows: Iterable[HourlyRow]) -> Usage:
    return sum((usage(row) for row in rows), Usage())
