"""The budget engine against a real ledger database: reservations, leases shared by replicas,
settlement in the import's transaction, expiry of a dead replica's lease, periods in a zone."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from prometheus_client import CollectorRegistry

from pricing import Price, PriceBook
from proxy.budget.engine import Budgets, Rejection
from proxy.budget.metrics import BudgetMetrics
from proxy.budget.periods import period_of
from proxy.budget.reserve import Reserver
from proxy.ledger import Ledger
from proxy.ledger.record import Record
from proxy.settings import Budget

T0 = datetime(2026, 1, 1, tzinfo=UTC)
AT = datetime(2026, 11, 10, 12, tzinfo=UTC)
# $1 per million input tokens, $2 per million output: a body of 1,000 bytes asking for 500 tokens
# reserves 1,000 x $1e-6 + 500 x $2e-6 = $0.002 = 20,000,000 units.
PRICE = Price(model="m", tier="standard", effective_from=T0, input=Decimal(1), output=Decimal(2),
              cache_read=Decimal("0.1"), cache_write=Decimal(1), source="t", match=("m",))
R = 20_000_000
REQUEST = {"model": "m", "max_tokens": 500}


def budget(limit: str, **kw: object) -> Budget:
    return Budget(name="b", limit_usd=Decimal(limit), mode="enforce", **kw)  # type: ignore[arg-type]


def engine(ledger: Ledger, b: Budget, replica: str, clock: Callable[[], float] = time.time) -> Budgets:
    e = Budgets([b], Reserver(PriceBook([PRICE])), ledger.store, BudgetMetrics(CollectorRegistry()), replica, clock)
    ledger.settled = e.settled
    return e


async def admit(e: Budgets, at: datetime = AT, tenant: str = "t") -> tuple[int | None, str | None] | Rejection:
    return await e.admit(tenant, None, "m", None, "up", REQUEST, 1000, at)


def record(i: int, reserved: int | None, leases: str | None, cost: int, at: datetime = AT) -> Record:
    return Record(id=f"r{i:06d}", start=at, tenant="t", endpoint="chat", stream=False, code=200, outcome="ok",
                  model="m", tier="standard", input_tokens=1, output_tokens=1, cost_units=cost,
                  reserved_units=reserved, budget_leases=leases)


async def until(cond: Callable[[], bool], timeout: float = 60) -> None:
    """Wait for `cond` with a generous deadline: a loaded machine may take long to run the importer."""
    async with asyncio.timeout(timeout):
        while not cond():
            await asyncio.sleep(0.005)


def started(url: str, ledgers: list[Ledger]) -> Ledger:
    ledger = Ledger(url)
    ledgers.append(ledger)
    ledger.start()
    return ledger


def test_a_request_reserves_its_worst_case_and_the_limit_holds(db_url: str, ledgers: list[Ledger]) -> None:
    ledger = started(db_url, ledgers)
    e = engine(ledger, budget("0.01"), "a")  # room for five reservations of $0.002

    async def burst() -> list[object]:
        return await asyncio.gather(*(admit(e) for _ in range(12)))

    results = asyncio.run(burst())
    admitted: list[tuple[int, str]] = [r for r in results if not isinstance(r, Rejection)]  # type: ignore[misc]
    refused = [r for r in results if isinstance(r, Rejection)]
    assert len(admitted) == 5 and all(r == (R, admitted[0][1]) for r in admitted)
    assert len(refused) == 7 and {r.reason for r in refused} == {"exceeded"}
    assert refused[0].period_end == datetime(2026, 12, 1, tzinfo=UTC)


def test_two_replicas_share_one_limit_under_concurrency(db_url: str, ledgers: list[Ledger]) -> None:
    ledger = started(db_url, ledgers)
    b = budget("0.1")  # room for 50 reservations
    a, c = engine(ledger, b, "a"), engine(ledger, b, "c")

    async def burst() -> list[object]:
        return await asyncio.gather(*(admit(a if i % 2 else c) for i in range(200)))

    results = asyncio.run(burst())
    assert sum(1 for r in results if not isinstance(r, Rejection)) == 50


def lease_amounts(ledger: Ledger) -> dict[str, int]:
    rows = ledger.store._read("SELECT id, amount FROM budget_leases", ())
    return {row["id"]: int(row["amount"]) for row in rows}


def test_an_import_turns_reservations_into_cost_once(db_url: str, ledgers: list[Ledger]) -> None:
    ledger = started(db_url, ledgers)
    e = engine(ledger, budget("0.01"), "a")

    async def run() -> None:
        e.start(asyncio.get_running_loop())
        got = [await admit(e) for _ in range(5)]
        assert all(not isinstance(g, Rejection) for g in got)
        assert isinstance(await admit(e), Rejection)
        lease_id = got[0][1]  # type: ignore[index]
        assert lease_amounts(ledger) == {lease_id: 5 * R}
        # Four requests cost a quarter of their reservation, one nothing: $0.002 spent of $0.01.
        ledger.append_many([record(i, R, lease_id, R // 4) for i in range(4)] + [record(9, R, lease_id, 0)])
        assert await asyncio.to_thread(ledger.flush)
        lease = e._by_id[lease_id]  # type: ignore[index]
        await until(lambda: lease.in_flight == 0)  # the settlement reaches the loop
        # The import took the reservations off the lease in its own transaction, then here.
        assert lease_amounts(ledger) == {lease_id: 0} and (lease.amount, lease.in_flight) == (0, 0)
        # $0.008 of room again: four more reservations fit, the fifth does not.
        more = [await admit(e) for _ in range(5)]
        assert sum(1 for m in more if not isinstance(m, Rejection)) == 4
        await e.stop()

    asyncio.run(run())


def test_a_model_without_a_price_is_refused_unless_allowed(db_url: str, ledgers: list[Ledger]) -> None:
    ledger = started(db_url, ledgers)

    async def unpriced(e: Budgets) -> object:
        return await e.admit("t", None, "no-such-model", None, "up", {"max_tokens": 5}, 10, AT)

    got = asyncio.run(unpriced(engine(ledger, budget("1"), "a")))
    assert isinstance(got, Rejection) and got.reason == "unpriced"
    # Allowed, it still holds a reservation: at the dearest rates of the entries (here m's, $1 and
    # $2 a million), as the upstream may answer with a priced model.
    got = asyncio.run(unpriced(engine(ledger, budget("1", allow_unpriced=True), "a")))
    assert not isinstance(got, Rejection) and got[0] == 10 * 10_000 + 5 * 20_000 and got[1]


def test_budgets_match_tenant_and_tag(db_url: str, ledgers: list[Ledger]) -> None:
    ledger = started(db_url, ledgers)
    e = engine(ledger, budget("0", tenant="search", tag="rag"), "a")
    assert asyncio.run(e.admit("other", "rag", "m", None, "up", REQUEST, 1000, AT)) == (None, None)
    assert asyncio.run(e.admit("search", None, "m", None, "up", REQUEST, 1000, AT)) == (None, None)
    assert isinstance(asyncio.run(e.admit("search", "rag", "m", None, "up", REQUEST, 1000, AT)), Rejection)


def age_leases(ledger: Ledger, replica: str, seconds: int) -> None:
    """As if `seconds` passed since the replica's leases were last renewed, by any clock."""
    with ledger.store.budget_locked(None) as session:
        session.execute(f"UPDATE budget_leases SET expires_at = expires_at - {seconds * 1_000_000} "
                        f"WHERE id LIKE {ledger.store.mark}", (f"{replica}.%",))


def test_a_killed_replicas_lease_stops_counting_after_90_seconds(db_url: str, ledgers: list[Ledger]) -> None:
    ledger = started(db_url, ledgers)
    b = budget("0.01")

    async def run() -> None:
        dead = engine(ledger, b, "dead")
        assert not isinstance(await admit(dead), Rejection)  # its lease holds part of the room
        alive = engine(ledger, b, "alive")
        held = await asyncio.gather(*(admit(alive) for _ in range(5)))
        assert sum(1 for h in held if not isinstance(h, Rejection)) < 5
        age_leases(ledger, "dead", 91)  # no renewal from the dead replica since
        late = await asyncio.gather(*(admit(alive) for _ in range(5)))
        assert sum(1 for h in late if not isinstance(h, Rejection)) >= 1

    asyncio.run(run())


@pytest.mark.parametrize("skew_s", [-120, 120])
def test_on_postgresql_leases_expire_by_the_databases_clock(pg_url: str, ledgers: list[Ledger], skew_s: int) -> None:
    # Replicas whose wall clocks differ by two minutes: neither takes the other's lease as expired
    # (nor as alive past its time), because expiry is written and read by PostgreSQL's clock.
    ledger = started(pg_url, ledgers)
    b = budget("0.01")  # room for 5 reservations of R

    async def run() -> None:
        off = engine(ledger, b, "off", clock=lambda: time.time() + skew_s)
        first = [await admit(off) for _ in range(3)]
        assert not any(isinstance(f, Rejection) for f in first)
        right = engine(ledger, b, "right")
        more = await asyncio.gather(*(admit(right) for _ in range(5)))
        assert sum(1 for m in more if not isinstance(m, Rejection)) <= 2
        age_leases(ledger, "off", 91)  # the skewed replica died 91 s ago, by the database's clock
        late = await asyncio.gather(*(admit(right) for _ in range(5)))
        assert sum(1 for h in late if not isinstance(h, Rejection)) >= 1

    asyncio.run(run())


@pytest.mark.parametrize(("tz", "at", "start", "end"), [
    # New York falls back on 2026-11-01: that local day is 25 hours long.
    ("America/New_York", datetime(2026, 11, 1, 12, tzinfo=UTC), datetime(2026, 11, 1, 4, tzinfo=UTC),
     datetime(2026, 11, 2, 5, tzinfo=UTC)),
    # and springs forward on 2026-03-08: 23 hours.
    ("America/New_York", datetime(2026, 3, 8, 12, tzinfo=UTC), datetime(2026, 3, 8, 5, tzinfo=UTC),
     datetime(2026, 3, 9, 4, tzinfo=UTC)),
    ("UTC", datetime(2026, 12, 31, 23, 59, tzinfo=UTC), datetime(2026, 12, 31, tzinfo=UTC),
     datetime(2027, 1, 1, tzinfo=UTC)),
])
def test_day_periods_follow_the_zone_across_dst(tz: str, at: datetime, start: datetime, end: datetime) -> None:
    assert period_of(Budget(name="b", limit_usd=Decimal(1), period="day", tz=tz), at) == (start, end)


def test_a_new_period_admits_again(db_url: str, ledgers: list[Ledger]) -> None:
    ledger = started(db_url, ledgers)
    e = engine(ledger, budget("0.002", period="day", tz="America/New_York"), "a")
    before = datetime(2026, 11, 2, 4, 59, tzinfo=UTC)  # 23:59 on the 25-hour day of 2026-11-01

    async def run() -> None:
        assert not isinstance(await admit(e, before), Rejection)
        assert isinstance(await admit(e, before + timedelta(seconds=30)), Rejection)
        assert not isinstance(await admit(e, before + timedelta(minutes=1)), Rejection)  # a new local day

    asyncio.run(run())


def test_a_record_imported_again_is_not_settled_twice(db_url: str, ledgers: list[Ledger]) -> None:
    # A replayed journal brings records the ledger already has: their reservations left the lease
    # when they first went in, so only the new ones in a batch are taken off again.
    ledger = started(db_url, ledgers)
    e = engine(ledger, budget("0.01"), "a")

    async def run() -> None:
        got = [await admit(e) for _ in range(3)]
        lease_id = got[0][1]  # type: ignore[index]
        first = record(1, R, lease_id, R // 2)
        ledger.append_many([first])
        assert await asyncio.to_thread(ledger.flush)
        assert lease_amounts(ledger) == {lease_id: 2 * R}
        ledger.append_many([first, record(2, R, lease_id, R // 2)])  # one again, one new
        assert await asyncio.to_thread(ledger.flush)
        assert lease_amounts(ledger) == {lease_id: R}

    asyncio.run(run())


def test_a_lease_the_database_let_expire_hands_out_nothing_until_a_grant(db_url: str, ledgers: list[Ledger]) -> None:
    # Replica a could not renew for longer than a lease lives: b may have taken the room meanwhile.
    ledger = started(db_url, ledgers)
    b = budget("0.1")  # room for 50 reservations; a lease takes a twentieth of the limit, 2.5 of them

    async def run() -> None:
        a, other = engine(ledger, b, "a"), engine(ledger, b, "b")
        first = await admit(a)
        lease = a._by_id[first[1]]  # type: ignore[index]
        assert lease.free > 0  # a block beyond its first reservation
        with ledger.store.budget_locked(None) as session:
            session.execute("UPDATE budget_leases SET expires_at = 0")
        lease.valid_until = 0.0  # as long without a renewal, locally too
        taken = [await admit(other) for _ in range(50)]
        assert sum(1 for t in taken if not isinstance(t, Rejection)) == 50  # the expired lease is not counted
        late = await admit(a)
        assert isinstance(late, Rejection) and late.reason == "exceeded"
        # A renewal does not bring the expired lease back without a grant.
        await a.renew()
        rows = ledger.store._read("SELECT expires_at FROM budget_leases WHERE id = " + ledger.store.mark,
                                  (lease.id,))
        assert [int(r["expires_at"]) for r in rows] == [0] and lease.valid_until == 0.0

    asyncio.run(run())


def test_a_request_that_ends_without_a_record_gives_its_reservation_back(db_url: str,
                                                                         ledgers: list[Ledger]) -> None:
    ledger = started(db_url, ledgers)
    e = engine(ledger, budget("0.01"), "a")

    async def run() -> None:
        r, leases = await admit(e)  # type: ignore[misc]
        lease = e._by_id[str(leases)]
        assert lease.in_flight == R
        e.release(r, leases)
        assert lease.in_flight == 0
        assert sum(1 for _ in [await admit(e) for _ in range(5)]) == 5

    asyncio.run(run())


def test_a_clean_shutdown_gives_an_idle_lease_back(db_url: str, ledgers: list[Ledger]) -> None:
    ledger = started(db_url, ledgers)
    e = engine(ledger, budget("0.1"), "a")

    async def run() -> None:
        e.start(asyncio.get_running_loop())
        now = datetime.now(UTC)  # a period that has not ended: its lease is renewed, not wound up
        r, leases = await admit(e, now)  # type: ignore[misc]
        assert lease_amounts(ledger)[str(leases)] > 0
        ledger.append_many([record(1, r, leases, r // 2, now)])
        assert await asyncio.to_thread(ledger.flush)
        await until(lambda: e._by_id[str(leases)].in_flight == 0)  # the settlement reaches the loop
        await e.stop()
        assert lease_amounts(ledger) == {}  # not held for another 90 s

    asyncio.run(run())


def test_a_refusal_says_why_the_request_does_not_fit(db_url: str, ledgers: list[Ledger]) -> None:
    """"Exhausted" only when the period's spend has reached the limit: a first request whose worst
    case is above the whole limit, or above what in-flight reservations leave, is told that."""
    ledger = started(db_url, ledgers)
    tiny = engine(ledger, Budget(name="tiny", limit_usd=Decimal("0.001"), mode="enforce"), "a")
    no = asyncio.run(admit(tiny))
    assert isinstance(no, Rejection) and no.reason == "exceeded"
    assert no.message() == ("this request may cost up to $0.002 (its input and max output tokens at their prices), "
                            "more than budget 'tiny''s whole limit of $0.001 for the period ending "
                            "2026-12-01T00:00:00Z: lower max_tokens or send less input")

    e = engine(ledger, budget("0.005"), "b")  # room for two reservations of $0.002, then $0.001 left

    async def three() -> list[object]:
        return [await admit(e) for _ in range(3)]

    first, second, third = asyncio.run(three())
    assert not isinstance(first, Rejection) and not isinstance(second, Rejection)
    assert isinstance(third, Rejection)
    assert third.message() == ("this request may cost up to $0.002 (its input and max output tokens at their "
                               "prices); budget 'b' has $0.001 of $0.005 left for the period ending "
                               "2026-12-01T00:00:00Z ($0.00 spent, the rest reserved by requests in flight)")

    # Once the spend itself reaches the limit, the budget is exhausted.
    lease_id = first[1]  # type: ignore[index]
    ledger.append_many([record(i, R, lease_id, R + R // 4) for i in range(2)])
    assert ledger.flush()
    assert asyncio.run(admit(e)).message() == "budget 'b' is exhausted for the period ending 2026-12-01T00:00:00Z"  # type: ignore[union-attr]
