"""The ledger's hourly sums as the report folds them: one `Group` per UTC hour and attribution key."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from proxy.ledger.store import HourlyRow
from proxy.report.model import Usage


@dataclass
class Sums:
    """A running total; `usage()` is its frozen value for the report."""

    requests: int = 0
    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    estimated: int = 0
    unpriced: int = 0
    cost_units: int = 0

    def add(self, g: Sums) -> None:
        self.requests += g.requests
        self.input_tokens += g.input_tokens
        self.cache_read_tokens += g.cache_read_tokens
        self.cache_write_tokens += g.cache_write_tokens
        self.output_tokens += g.output_tokens
        self.reasoning_tokens += g.reasoning_tokens
        self.estimated += g.estimated
        self.unpriced += g.unpriced
        self.cost_units += g.cost_units

    @property
    def input_side(self) -> int:
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def billed_tokens(self) -> int:  # the four billing categories; reasoning is inside output
        return self.input_side + self.output_tokens

    def usage(self) -> Usage:
        return Usage(self.requests, self.input_tokens, self.cache_read_tokens, self.cache_write_tokens,
                     self.output_tokens, self.reasoning_tokens, self.cost_units)


@dataclass
class Group(Sums):
    hour: datetime = field(default_factory=lambda: datetime.min.replace(tzinfo=UTC))  # UTC start of the hour
    model: str = ""
    unpriced_model: bool = False
    tier: str = ""
    upstream: str = ""
    tenant: str = ""
    tag: str = ""
    workload: str = ""
    metered: bool = False


def read_groups(rows: Iterable[HourlyRow]) -> list[Group]:
    """Store.hourly_rows as Groups the report folds."""
    return [Group(hour=row.start, model=row.model, unpriced_model=row.unpriced_model, tier=row.tier,
                  upstream=row.upstream, tenant=row.tenant, tag=row.tag, workload=row.workload, metered=row.metered,
                  requests=row.requests, input_tokens=row.input_tokens, cache_read_tokens=row.cache_read_tokens,
                  cache_write_tokens=row.cache_write_tokens, output_tokens=row.output_tokens,
                  reasoning_tokens=row.reasoning_tokens, estimated=row.estimated, unpriced=row.unpriced,
                  cost_units=row.cost_units) for row in rows]
