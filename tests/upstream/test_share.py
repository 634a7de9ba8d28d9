"""FairShare on its own: slots per tenant, handed on in order, none lost to a waiter that leaves."""

from __future__ import annotations

import asyncio

import pytest

from proxy.errors import PoolTimeout
from proxy.upstream.share import FairShare


def test_slots_are_per_tenant_and_handed_on_in_order() -> None:
    async def main() -> list[str]:
        share, order = FairShare(1, "up"), []
        await share.enter("a", 5)
        await share.enter("b", 5)  # another tenant: its own slot

        async def wait(name: str) -> None:
            await share.enter("a", 5)
            order.append(name)

        first, second = asyncio.create_task(wait("first")), asyncio.create_task(wait("second"))
        while len(share._tenants["a"].waiters) < 2:
            await asyncio.sleep(0)
        share.leave("a")
        await first
        share.leave("a")
        await second
        share.leave("a")
        share.leave("b")
        assert share.active("a") == share.active("b") == 0 and not share._tenants
        return order

    assert asyncio.run(main()) == ["first", "second"]


def test_a_waiter_that_leaves_or_times_out_costs_no_slot() -> None:
    async def main() -> None:
        share, counted = FairShare(1, "up"), []
        share.on_waiting = counted.append
        await share.enter("a", 5)
        gone = asyncio.create_task(share.enter("a", 5))
        while not share._tenants["a"].waiters:
            await asyncio.sleep(0)
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        with pytest.raises(PoolTimeout):
            await share.enter("a", 0.01)
        share.leave("a")
        await share.enter("a", 5)  # the slot came back, not to a waiter that left
        assert share.active("a") == 1 and sum(counted) == 0
        share.leave("a")

    asyncio.run(main())
