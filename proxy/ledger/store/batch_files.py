"""Who owns a batch, and which batch named a file as its output (migrations 010, 011). Both dialects.

A batch belongs to the tenant whose request created it through llmmeter (the answer to
POST /v1/batches or POST /v1/messages/batches), never to one that only saw it: on an
upstream account every tenant shares, any tenant's listing shows every batch. A file is
known as batch output when a batch object named it; its owner is that batch's creator.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from proxy.ledger.store.rows import Row


@dataclass(frozen=True, slots=True)
class BatchFile:
    """A file a batch object named as its output."""

    batch_id: str
    owner: str | None  # the tenant that created the batch through llmmeter; None: not seen created


class Session(Protocol):
    def execute(self, sql: str, params: tuple[object, ...] = ()) -> None: ...

    def fetch(self, sql: str, params: tuple[object, ...] = ()) -> list[Row]: ...


def note_owner(session: Session, mark: str, upstream: str, batch_id: str, tenant: str, at_us: int) -> None:
    """The creating tenant; an upstream never hands out one batch id twice, so a second
    claim (a replayed or hostile answer) changes nothing."""
    m = mark
    session.execute(f"INSERT INTO batch_owners (upstream, batch_id, tenant, created_at) "
                    f"VALUES ({m}, {m}, {m}, {m}) ON CONFLICT (upstream, batch_id) DO NOTHING",
                    (upstream, batch_id, tenant, at_us))


def note_files(session: Session, mark: str, upstream: str, batch_id: str, file_ids: Iterable[str],
               at_us: int) -> None:
    """Files a batch object named as its output; whoever's request showed it, it names no owner."""
    m = mark
    for file_id in file_ids:
        session.execute(f"INSERT INTO batch_files (upstream, file_id, batch_id, seen_at) "
                        f"VALUES ({m}, {m}, {m}, {m}) ON CONFLICT (upstream, file_id) DO NOTHING",
                        (upstream, file_id, batch_id, at_us))


def owner_sql(mark: str) -> str:
    """The tenant that created a batch: one row `tenant`, or none."""
    return f"SELECT tenant FROM batch_owners WHERE upstream = {mark} AND batch_id = {mark}"


def file_sql(mark: str) -> str:
    """A batch output file: one row (`batch_id`, `tenant` — NULL when llmmeter did not see the
    batch created), or none when no batch named it."""
    return (f"SELECT f.batch_id AS batch_id, o.tenant AS tenant FROM batch_files f "
            f"LEFT JOIN batch_owners o ON o.upstream = f.upstream AND o.batch_id = f.batch_id "
            f"WHERE f.upstream = {mark} AND f.file_id = {mark}")
