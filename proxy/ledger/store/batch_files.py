"""Which tenant's batch named a file as its output (migration 010): read before a download is
metered as batch results, written when a batch object passes through. Both dialects."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from proxy.ledger.store.rows import Row


class Session(Protocol):
    def execute(self, sql: str, params: tuple[object, ...] = ()) -> None: ...

    def fetch(self, sql: str, params: tuple[object, ...] = ()) -> list[Row]: ...


def note(session: Session, mark: str, upstream: str, tenant: str, batch_id: str, file_ids: Iterable[str],
         at_us: int) -> None:
    """The first tenant to see a file keeps it: a later batch object naming it changes nothing."""
    m = mark
    for file_id in file_ids:
        session.execute(f"INSERT INTO batch_files (upstream, file_id, tenant, batch_id, seen_at) "
                        f"VALUES ({m}, {m}, {m}, {m}, {m}) ON CONFLICT (upstream, file_id) DO NOTHING",
                        (upstream, file_id, tenant, batch_id, at_us))


def owner_sql(mark: str) -> str:
    return f"SELECT tenant FROM batch_files WHERE upstream = {mark} AND file_id = {mark}"
