"""The ledger's hourly sums as the report folds them: one `Group` per UTC hour and attribution key."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

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


def read_groups(rows: Iterable[tuple[Any, ...]]) -> list[Group]:
    """Store.hourly's rows (HOURLY_SQL's columns, the cost already one integer) as Groups."""
    out = []
    for (hour, model, unpriced_model, tier, upstream, tenant, tag, workload, metered, requests,
         inp, cr, cw, outp, reasoning, estimated, unpriced, units) in rows:
        out.append(Group(
            hour=datetime.fromtimestamp(hour * 3600, UTC), model=model, unpriced_model=bool(unpriced_model),
            tier=tier, upstream=upstream, tenant=tenant, tag=tag, workload=workload, metered=bool(metered),
            requests=int(requests), input_tokens=int(inp), cache_read_tokens=int(cr), cache_write_tokens=int(cw),
            output_tokens=int(outp), reasoning_tokens=int(reasoning), estimated=int(estimated),
            unpriced=int(unpriced), cost_units=int(units)))
    return out
