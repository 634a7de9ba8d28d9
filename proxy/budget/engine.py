"""Enforced budgets on the request path (SPEC "Budgets (enforced)").

A request must fit every enforced budget that matches it (its tenant, its tag, the whole
proxy). Its reservation (proxy/budget/reserve.py) is taken from this replica's lease of each
budget's current period, in memory, with no await between the check and the take; only when a
lease runs short does the replica ask the database for more (proxy/ledger/store/budgets.py),
one request per budget at a time, under the budget's lock there. The record the request ends
with carries its reservation and lease ids; the import that adds its cost to the ledger removes
the reservation from the lease in the same transaction, and then here (`settled`).

What the database holds for a lease is never below what this replica may still hand out or
has handed out and not yet settled: grants add there first, settlements subtract there first,
and a renewal writes this replica's figure, which lags the database only upward.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal

from proxy.budget.metrics import BudgetMetrics
from proxy.budget.periods import period_of
from proxy.budget.reserve import Reserver
from proxy.budget.unseen import OVER_RESERVATION
from proxy.ledger.record import COST_UNITS_PER_USD, Record
from proxy.ledger.store import SqlStore
from proxy.ledger.store.budgets import (
    LEASE_TTL_US,
    RENEW_EVERY_S,
    Grant,
    Scope,
    Session,
    Standing,
    alert_once,
    clock,
    drop,
    grant,
    renew,
    standing,
    usd_units,
)
from proxy.ledger.store.rows import to_micros
from proxy.settings import Budget

log = logging.getLogger("llmmeter.budget")

BUDGET_EXCEEDED = "budget_exceeded"
REFRESH_EVERY_S = 5.0  # spent and alerts, for the gauges
VALID_FOR_S = LEASE_TTL_US / 1e6 - 30.0  # a lease's local life after the database confirmed it


@dataclass(frozen=True, slots=True)
class Rejection:
    budget: Budget
    period_end: datetime
    reserved: int | None  # the request's reservation, None when its model has no price
    reason: str  # "exceeded" | "unpriced" | "unavailable"
    spent: int | None = None  # units: the period's priced cost when refused for room ("exceeded")
    left: int | None = None  # units this request could still have reserved then

    def message(self) -> str:
        name = self.budget.name
        if self.reason == "unpriced":
            return (f"budget {name!r} is enforced and this model has no price, so its cost cannot "
                    "be bounded (allow_unpriced = true admits such requests)")
        if self.reason == "unavailable":
            return f"budget {name!r} cannot be checked right now (the ledger database is unavailable)"
        end = self.period_end.isoformat().replace("+00:00", "Z")
        limit = usd_units(self.budget.limit_usd)
        # A request whose worst case cannot fit is told so: "exhausted" only when it is.
        if self.reserved is not None and self.reserved > limit:
            return (f"this request may cost up to {_dollars(self.reserved)} (its input and max output tokens at "
                    f"their prices), more than budget {name!r}'s whole limit of {_dollars(limit)} for the period "
                    f"ending {end}: lower max_tokens or send less input")
        if self.spent is not None and self.spent < limit and self.reserved is not None and self.left is not None:
            return (f"this request may cost up to {_dollars(self.reserved)} (its input and max output tokens at "
                    f"their prices); budget {name!r} has {_dollars(self.left)} of {_dollars(limit)} left for the "
                    f"period ending {end} ({_dollars(self.spent)} spent, the rest reserved by requests in flight)")
        return f"budget {name!r} is exhausted for the period ending {end}"


def _dollars(units: int) -> str:
    """Exact, so a small reservation never reads as $0.00."""
    d = Decimal(units) / COST_UNITS_PER_USD
    return f"${d.quantize(Decimal('0.01')):,}" if d >= 1 or not d else f"${format(d.normalize(), 'f')}"


@dataclass(slots=True)
class _Lease:
    """This replica's share of one budget's period."""

    id: str
    budget: Budget
    scope: Scope
    end: datetime
    limit: int  # units
    amount: int = 0  # units the database holds for this lease
    in_flight: int = 0  # reservations handed out, not yet settled
    used: bool = False  # a reservation was taken since the last renewal
    # Local monotonic time until which the database surely still counts this lease: its last
    # grant or renewal plus the lease's life, less a margin for clocks and slow renewals. Past
    # it, nothing is handed out before the database has confirmed the lease again.
    valid_until: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def free(self) -> int:
        if time.monotonic() >= self.valid_until:
            return 0
        return self.amount - self.in_flight


class Budgets:
    """Every `[[budget]]`; `admit` gates requests for the enforced ones."""

    def __init__(self, budgets: Sequence[Budget], reserver: Reserver, store: SqlStore, metrics: BudgetMetrics,
                 replica: str, clock: Callable[[], float] = time.time) -> None:
        self.budgets = tuple(budgets)
        self.enforced = tuple(b for b in budgets if b.enforced)
        self.reserver, self.store, self.metrics = reserver, store, metrics
        self.replica, self.clock = replica, clock
        self.limits = {b.name: usd_units(b.limit_usd) for b in budgets}
        self._current: dict[str, _Lease] = {}  # budget -> lease of the latest period requests fell in
        self._periods: dict[tuple[str, int], _Lease] = {}  # (budget, period start) -> this replica's lease
        self._by_id: dict[str, _Lease] = {}  # the same leases by id, for settling records
        self._alerted: set[tuple[str, int, int]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        for b in budgets:
            metrics.limit.labels(b.name).set(float(b.limit_usd))
            # Every series from the start, at 0: increase() cannot see a counter's first step otherwise.
            metrics.rejections.labels(b.name)
            metrics.overrun.labels(b.name)
            for pct in b.alert_at_pct:
                metrics.alerts.labels(b.name, str(pct))

    # -- the request path -------------------------------------------------------------------

    def matching(self, tenant: str, tag: str | None) -> list[Budget]:
        return [b for b in self.enforced
                if (b.tenant is None or b.tenant == tenant) and (b.tag is None or b.tag == tag)]

    async def admit(self, tenant: str, tag: str | None, model: str | None, tier: str | None, upstream: str | None,
                    request: object, body_bytes: int, at: datetime) -> tuple[int | None, str | None] | Rejection:
        """(reservation, lease ids) for an admitted request ((None, None): no budget gates it), or the
        Rejection of the first budget it does not fit."""
        budgets = self.matching(tenant, tag)
        if not budgets:
            return None, None
        r = self.reserver.worst_case(model, tier, upstream, request, body_bytes, at)
        if r is None:
            strict = [b for b in budgets if not b.allow_unpriced]
            if strict:
                return self._rejected(strict[0], at, None, "unpriced")
            # The upstream may answer with a priced model, which is then billed: the request holds
            # a reservation like any other, so what it bills beyond it is flagged and counted.
            r = self.reserver.ceiling_case(model, upstream, request, body_bytes, at)
        leases = [self._lease(b, at) for b in budgets]
        while True:
            short = next((lease for lease in leases if lease.free < r), None)
            if short is None:
                for lease in leases:
                    lease.in_flight += r
                    lease.used = True
                return r, ",".join(lease.id for lease in leases)
            async with short.lock:
                if short.free >= r:
                    continue  # another request grew it meanwhile
                free = short.free
                try:
                    g = await asyncio.to_thread(self._grant, short, r - free)
                    # An expired lease is renewed by the grant too: what it still held counts again.
                except Exception as e:  # the database is away: an enforced budget fails closed
                    log.warning("budget %s: cannot reach the ledger database to reserve: %s", short.budget.name, e)
                    return self._rejected(short.budget, at, r, "unavailable")
                if g.granted == 0:
                    st = g.standing
                    left = max(0, free + short.limit - st.spent - st.others - st.mine)
                    return self._rejected(short.budget, at, r, "exceeded", st.spent, left)
                short.amount += g.granted

    def release(self, reserved: int | None, leases: str | None) -> None:
        """A request admitted but ended with no record (an error in the relay): its reservation
        goes back to its leases here; the database never took it off, as no import settles it."""
        if reserved is None or not leases:
            return
        for lease_id in leases.split(","):
            lease = self._by_id.get(lease_id)
            if lease is not None:
                lease.in_flight -= reserved

    def _rejected(self, budget: Budget, at: datetime, r: int | None, reason: str, spent: int | None = None,
                  left: int | None = None) -> Rejection:
        self.metrics.rejections.labels(budget.name).inc()
        return Rejection(budget, period_of(budget, at)[1], r, reason, spent, left)

    def _lease(self, budget: Budget, at: datetime) -> _Lease:
        """This replica's lease of the budget's period that holds `at` (made on first use)."""
        lease = self._current.get(budget.name)
        us = to_micros(at)
        if lease is not None and lease.scope.lo_us <= us < lease.scope.hi_us:
            return lease
        lo, hi = period_of(budget, at)
        found = self._periods.get((budget.name, to_micros(lo)))
        if found is None:
            scope = Scope(budget.name, to_micros(lo), to_micros(hi), budget.tenant, budget.tag)
            found = _Lease(f"{self.replica}.{secrets.token_hex(6)}", budget, scope, hi, self.limits[budget.name])
            self._periods[(budget.name, scope.lo_us)] = found
            self._by_id[found.id] = found
        if lease is None or found.scope.lo_us > lease.scope.lo_us:
            self._current[budget.name] = found
        return found

    def _grant(self, lease: _Lease, need: int) -> Grant:
        """In a thread: ask the database for at least `need` more units for this lease."""
        started = time.monotonic()
        with self.store.budget_locked(lease.budget.name) as session:
            g = grant(session, self.store.mark, lease.scope, lease.id, lease.limit, need, lease.limit // 20,
                      self._now_us(session))
        if g.granted:
            lease.valid_until = started + VALID_FOR_S
        self._observe(lease.budget, g.standing)
        return g

    # -- settling -----------------------------------------------------------------------------

    def settled(self, records: Sequence[Record]) -> None:
        """From the importer's thread: these records are in the ledger (or set aside). Their
        reservations leave the leases (the database's part was done in the import)."""
        if self._loop is None:
            self._settle(records)
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed at shutdown: nothing left to gate
                self._loop.call_soon_threadsafe(self._settle, records)

    def _settle(self, records: Sequence[Record]) -> None:
        touched: set[str] = set()
        for rec in records:
            r, ids = rec.reserved_units, rec.budget_leases
            if r is None or not ids:
                continue
            for lease_id in ids.split(","):
                lease = self._by_id.get(lease_id)
                if lease is None:
                    continue  # a lease of an earlier process (a replayed journal): settled in its import
                lease.amount -= r
                lease.in_flight -= r
                touched.add(lease.budget.name)
                if OVER_RESERVATION in rec.flags and rec.cost_units is not None:
                    self.metrics.overrun.labels(lease.budget.name).inc((rec.cost_units - r) / COST_UNITS_PER_USD)
        for name in touched:
            self._show_reserved(name)

    def _show_reserved(self, budget: str) -> None:
        """The reserved gauge: set here and by the upkeep, never per request (it costs a label
        lookup and a sum over the leases)."""
        held = sum(lease.in_flight for lease in self._by_id.values() if lease.budget.name == budget)
        self.metrics.reserved.labels(budget).set(held / COST_UNITS_PER_USD)

    # -- upkeep ---------------------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._task = loop.create_task(self._upkeep())

    async def stop(self) -> None:
        """At shutdown: a lease with nothing in flight is given back at once, not after 90 s (a
        rolling restart would hold each replica's block that long)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for lease in [lease for lease in self._by_id.values() if lease.in_flight <= 0]:
            try:
                await asyncio.to_thread(self._write_lease, lease.id, lease.budget.name, 0)
            except Exception as e:  # it expires by itself
                log.warning("budget %s: lease not given back at shutdown: %s", lease.budget.name, e)
        self._loop = None

    async def _upkeep(self) -> None:
        last_renewal = float("-inf")
        while True:
            for b in self.enforced:
                self._show_reserved(b.name)
            # A failed renewal is tried again at the next tick, not in 30 s.
            if time.monotonic() - last_renewal >= RENEW_EVERY_S and await self.renew():
                last_renewal = time.monotonic()
            try:
                await asyncio.to_thread(self.refresh)
            except Exception as e:  # the database may be away: the gauges wait for it
                log.warning("budget spent could not be read: %s", e)
            await asyncio.sleep(REFRESH_EVERY_S)

    async def renew(self) -> bool:
        """Keep this replica's leases alive; give back what an idle or finished period holds
        beyond its requests in flight; forget a finished period once all of it is settled.
        True when every lease was renewed."""
        now = to_micros(datetime.now(UTC))
        ok = True
        for lease in list(self._by_id.values()):
            async with lease.lock:
                ended = now >= lease.scope.hi_us
                if ended or not lease.used:
                    # Lowered here first, on the loop: no request can be admitted from what is given back.
                    lease.amount = max(lease.in_flight, 0)
                written = lease.amount
                lease.used = False
                started = time.monotonic()
                try:
                    alive = await asyncio.to_thread(self._write_lease, lease.id, lease.budget.name, written)
                except Exception as e:  # this lease is tried again at the next tick; the others go on
                    log.warning("budget %s: lease renewal failed: %s", lease.budget.name, e)
                    ok = False
                    continue
                if alive:
                    lease.valid_until = started + VALID_FOR_S
                else:
                    # The database let it expire (other replicas may have used its room since):
                    # nothing more is handed out from it before a grant, which checks the room.
                    lease.valid_until = 0.0
                if ended and lease.in_flight <= 0 and written <= 0:  # its row is gone too
                    del self._by_id[lease.id]
                    self._periods.pop((lease.budget.name, lease.scope.lo_us), None)
        return ok

    def _write_lease(self, lease_id: str, budget: str, amount: int) -> bool:
        """The lease's figure as this replica knows it (never below the truth, see the module's
        docstring), renewed for another LEASE_TTL_US, but only while the database still counts
        it: an expired lease is never brought back without a grant. A lease holding nothing is
        deleted. True when the lease is alive (or was deleted)."""
        with self.store.budget_locked(budget) as session:
            if amount <= 0:
                drop(session, self.store.mark, lease_id)
                return True
            return renew(session, self.store.mark, lease_id, amount, self._now_us(session))

    def refresh(self) -> None:
        """In a thread: every budget's spent for the gauges, and its alert thresholds."""
        now = datetime.now(UTC)
        for b in self.budgets:
            lo, hi = period_of(b, now)
            scope = Scope(b.name, to_micros(lo), to_micros(hi), b.tenant, b.tag)
            with self.store.budget_locked(None) as session:
                now_us = self._now_us(session)
                s = standing(session, self.store.mark, scope, "", now_us)
                self._observe(b, s)
                limit = self.limits[b.name]
                for pct in b.alert_at_pct:
                    key = (b.name, scope.lo_us, pct)
                    if key in self._alerted or s.spent * 100 < limit * pct:
                        continue
                    first = alert_once(session, self.store.mark, b.name, scope.lo_us, pct, now_us)
                    self._alerted.add(key)  # after the write: a failed one is tried again next time
                    if first:
                        self.metrics.alerts.labels(b.name, str(pct)).inc()
                        log.warning("budget %s: %d%% of %s USD spent in the period starting %s", b.name, pct,
                                    b.limit_usd, lo.isoformat())

    def _observe(self, budget: Budget, s: Standing) -> None:
        self.metrics.spent.labels(budget.name).set(s.spent / COST_UNITS_PER_USD)

    def _now_us(self, session: Session) -> int:
        """Now for the leases' expiry: the database's clock, so that every replica compares
        expiries by the same one whatever its host's says; on SQLite, this process's `clock`."""
        return clock(session, self.store.clock_sql, int(self.clock() * 1_000_000))
