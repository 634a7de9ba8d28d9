"""A tenant's fair share of one upstream's connections (`server.max_connections_per_tenant`).

Without it one tenant's burst holds every `max_connections` slot and every other tenant's
requests queue behind it. A request takes a slot of its tenant's share before it asks the
pool for a connection and gives it back when the exchange ends; past the share it waits in
order behind its own tenant's requests only, at most `connect_timeout_s`, then `PoolTimeout`
(503), as a request waiting for the pool does.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from proxy.errors import PoolTimeout


class _Tenant:
    __slots__ = ("active", "waiters")

    def __init__(self) -> None:
        self.active = 0
        self.waiters: deque[asyncio.Future[None]] = deque()


class FairShare:
    """At most `limit` exchanges of one tenant at a time; `enter` waits, `leave` hands the slot on."""

    def __init__(self, limit: int, upstream: str, on_waiting: Callable[[int], None] | None = None) -> None:
        self.limit, self.upstream = limit, upstream
        self.on_waiting = on_waiting  # +1 / -1, as requests waiting for the pool are counted
        self._tenants: dict[str, _Tenant] = {}

    def active(self, tenant: str) -> int:
        t = self._tenants.get(tenant)
        return 0 if t is None else t.active

    async def enter(self, tenant: str, timeout: float) -> None:
        t = self._tenants.get(tenant)
        if t is None:
            t = self._tenants[tenant] = _Tenant()
        if t.active < self.limit and not t.waiters:
            t.active += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        t.waiters.append(waiter)
        if self.on_waiting is not None:
            self.on_waiting(1)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except BaseException as e:
            if waiter.done() and not waiter.cancelled():  # the slot was handed over as the wait ended
                if isinstance(e, TimeoutError):
                    return  # in time after all: take it
                self.leave(tenant)  # cancelled: pass it on
                raise
            waiter.cancel()
            if waiter in t.waiters:
                t.waiters.remove(waiter)
            self._forget(tenant, t)
            if isinstance(e, TimeoutError):
                raise PoolTimeout(f"tenant {tenant!r} kept its share of upstream {self.upstream!r} "
                                  f"({self.limit} connections) busy for {timeout:g} s") from None
            raise
        finally:
            if self.on_waiting is not None:
                self.on_waiting(-1)

    def leave(self, tenant: str) -> None:
        """An exchange of `tenant` ended: its slot goes to the tenant's next waiter, if any."""
        t = self._tenants.get(tenant)
        if t is None:
            return
        while t.waiters:
            waiter = t.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot changes hands: `active` stays
                return
        t.active -= 1
        self._forget(tenant, t)

    def _forget(self, tenant: str, t: _Tenant) -> None:
        if t.active <= 0 and not t.waiters:  # tenant names may come from a header: keep no idle ones
            del self._tenants[tenant]
