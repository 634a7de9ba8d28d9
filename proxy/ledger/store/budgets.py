"""Budget leases in the ledger's database (SPEC "Budgets (enforced)", migration 008).

A lease is a replica's share of one budget's period: the units it may hand out as
reservations without asking the database. The invariant every grant keeps, under the
budget's lock, is

    spent (priced cost of the period's records in the ledger) + every live lease <= limit

and an import removes each record's reservation from its lease in the transaction that adds
the record's cost to `spent` (proxy/ledger/store/sqlite.py, postgres.py): a reservation
becomes its real cost in one step, never both or neither. A lease not renewed for
LEASE_TTL_US (its replica died) stops counting by itself.

Expiry is decided by one clock: every `now_us` here comes from `clock` (the database's own
clock on PostgreSQL), never from a replica's wall clock. A replica whose clock is off would
otherwise write expiries in its own time and read the others' in it: one two minutes behind
writes leases the others take as expired, and their room is handed out twice.

Spent and the leases are read in one statement: on PostgreSQL each statement sees one
snapshot, so an import committing between two reads cannot hide its cost from both.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

from pricing.calculator import UNITS_PER_USD
from proxy.ledger.record import Record
from proxy.ledger.store.rows import HOUR_US, Row, exact, money, whole_hours
from proxy.ledger.store.sql import COST_REST, COST_USD

LEASE_TTL_US = 90_000_000  # a lease expires 90 s after its last renewal
RENEW_EVERY_S = 30.0


class Session(Protocol):
    def execute(self, sql: str, params: tuple[object, ...] = ()) -> None: ...

    def fetch(self, sql: str, params: tuple[object, ...] = ()) -> list[Row]: ...


@dataclass(frozen=True, slots=True)
class Scope:
    """One budget's period and what it counts: its tenant and tag, or everything."""

    budget: str
    lo_us: int  # period start, UTC microseconds
    hi_us: int  # period end (exclusive)
    tenant: str | None = None
    tag: str | None = None


@dataclass(frozen=True, slots=True)
class Standing:
    spent: int  # units: the period's priced cost in the ledger
    others: int  # units held by other live leases
    mine: int  # units held by this lease in the database


@dataclass(frozen=True, slots=True)
class Grant:
    granted: int  # units added to the lease (0: refused)
    standing: Standing


def _filters(scope: Scope, mark: str) -> tuple[str, tuple[object, ...]]:
    sql, params = "", ()  # type: tuple[str, tuple[object, ...]]
    if scope.tenant is not None:
        sql, params = f" AND tenant = {mark}", (scope.tenant,)
    if scope.tag is not None:
        sql += f" AND tag = {mark}"  # a budget's tag is never empty, so an untagged row never matches
        params = (*params, scope.tag)
    return sql, params


def clock(session: Session, clock_sql: str | None, local_us: int) -> int:
    """Now, in UTC microseconds, by the database's clock (`local_us` when it has none to offer)."""
    if clock_sql is None:
        return local_us
    return exact(session.fetch(clock_sql)[0]["now_us"])


def standing_sql(scope: Scope, mark: str, lease_id: str, now_us: int) -> tuple[str, tuple[object, ...]]:
    """Spent (whole hours from the rollup, the partial ones from the requests) and the leases."""
    first, last = whole_hours(scope.lo_us, scope.hi_us)
    rf, rp = _filters(scope, mark)
    qf, qp = rf, rp
    m = mark
    sql = (
        f"SELECT (SELECT COALESCE(SUM(cost_usd), 0) FROM hourly_rollup WHERE hour >= {m} AND hour < {m}{rf}) AS r_usd,"
        f" (SELECT COALESCE(SUM(cost_units), 0) FROM hourly_rollup WHERE hour >= {m} AND hour < {m}{rf}) AS r_rest,"
        f" (SELECT COALESCE(SUM({COST_USD}), 0) FROM requests WHERE ((start >= {m} AND start < {m})"
        f" OR (start >= {m} AND start < {m})){qf}) AS p_usd,"
        f" (SELECT COALESCE(SUM({COST_REST}), 0) FROM requests WHERE ((start >= {m} AND start < {m})"
        f" OR (start >= {m} AND start < {m})){qf}) AS p_rest,"
        f" (SELECT COALESCE(SUM(amount), 0) FROM budget_leases WHERE budget = {m} AND period_start = {m}"
        f" AND expires_at > {m} AND id <> {m}) AS others,"
        f" (SELECT COALESCE(SUM(amount), 0) FROM budget_leases WHERE id = {m}) AS mine")
    hours = (first // HOUR_US, last // HOUR_US)
    partial = (scope.lo_us, first, last, scope.hi_us)
    params = (*hours, *rp, *hours, *rp, *partial, *qp, *partial, *qp,
              scope.budget, scope.lo_us, now_us, lease_id, lease_id)
    return sql, params


def standing(session: Session, mark: str, scope: Scope, lease_id: str, now_us: int) -> Standing:
    sql, params = standing_sql(scope, mark, lease_id, now_us)
    row = session.fetch(sql, params)[0]
    spent = money(row["r_usd"], row["r_rest"]) + money(row["p_usd"], row["p_rest"])
    return Standing(spent, exact(row["others"]), exact(row["mine"]))


def grant(session: Session, mark: str, scope: Scope, lease_id: str, limit: int, need: int, block: int,
          now_us: int) -> Grant:
    """Under the budget's lock: add `need` units to this lease, and up to `block` more while that
    leaves three quarters of the room to the other replicas; nothing when `need` does not fit."""
    s = standing(session, mark, scope, lease_id, now_us)
    room = limit - s.spent - s.others - s.mine
    if need > room:
        return Grant(0, s)
    extra = max(need, min(block, room // 4))
    adjust(session, mark, scope, lease_id, extra, now_us)
    return Grant(extra, s)


def adjust(session: Session, mark: str, scope: Scope, lease_id: str, delta: int, now_us: int) -> None:
    """Add `delta` (negative: give back) to the lease and renew it."""
    m = mark
    session.execute(
        f"INSERT INTO budget_leases (id, budget, period_start, amount, expires_at) VALUES ({m}, {m}, {m}, {m}, {m}) "
        "ON CONFLICT (id) DO UPDATE SET amount = budget_leases.amount + excluded.amount, "
        "expires_at = excluded.expires_at",
        (lease_id, scope.budget, scope.lo_us, delta, now_us + LEASE_TTL_US))


def renew(session: Session, mark: str, lease_id: str, amount: int, now_us: int) -> bool:
    """Set a live lease's figure and give it another LEASE_TTL_US; False when the lease has
    already expired (it is never brought back without a grant, which checks the room)."""
    m = mark
    rows = session.fetch(f"UPDATE budget_leases SET amount = {m}, expires_at = {m} "
                         f"WHERE id = {m} AND expires_at > {m} RETURNING id",
                         (amount, now_us + LEASE_TTL_US, lease_id, now_us))
    return bool(rows)


def drop(session: Session, mark: str, lease_id: str) -> None:
    session.execute(f"DELETE FROM budget_leases WHERE id = {mark}", (lease_id,))


def settle_sql(mark: str) -> str:
    """Run by the importer once per (lease, record reservation) in the transaction that inserts it."""
    return f"UPDATE budget_leases SET amount = amount - {mark} WHERE id = {mark}"


def settlements(records: Iterable[Record], inserted: Container[str] | None) -> list[tuple[int, str]]:
    """(units, lease id) to take off each lease: the summed reservations of the records this
    transaction inserted (None: all of them). A record already in the ledger (a journal replayed
    again) was settled when it first went in. One UPDATE per lease, not per record."""
    per_lease: dict[str, int] = {}
    for r in records:
        if r.reserved_units and r.budget_leases and (inserted is None or r.id in inserted):
            for lease in r.budget_leases.split(","):
                per_lease[lease] = per_lease.get(lease, 0) + r.reserved_units
    return [(units, lease) for lease, units in per_lease.items()]


def alert_once(session: Session, mark: str, budget: str, period_start_us: int, threshold: int, now_us: int) -> bool:
    """True for the one replica that records this crossing first (once per budget, period, threshold)."""
    m = mark
    rows = session.fetch(
        f"INSERT INTO budget_alerts (budget, period_start, threshold, at) VALUES ({m}, {m}, {m}, {m}) "
        "ON CONFLICT DO NOTHING RETURNING threshold", (budget, period_start_us, threshold, now_us))
    return bool(rows)


def usd_units(usd: Decimal) -> int:
    """Dollars as units (10^-10 USD), exact (a budget's limit has at most 10 decimal places)."""
    return int(usd * UNITS_PER_USD)
