"""A budget's calendar periods: a day or a month of its own time zone, as UTC instants."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from proxy.settings import Budget


def period_of(budget: Budget, at: datetime) -> tuple[datetime, datetime]:
    """[start, end) of the period that holds `at`, in UTC. Across a DST change a day is 23 or 25
    hours long; the boundaries are the zone's own midnights."""
    zone = ZoneInfo(budget.tz)
    local = at.astimezone(zone)
    if budget.period == "day":
        start = datetime(local.year, local.month, local.day, tzinfo=zone)
        nxt = local.date() + timedelta(days=1)
        end = datetime(nxt.year, nxt.month, nxt.day, tzinfo=zone)
    else:
        start = datetime(local.year, local.month, 1, tzinfo=zone)
        end = datetime(local.year + local.month // 12, local.month % 12 + 1, 1, tzinfo=zone)
    return start.astimezone(UTC), end.astimezone(UTC)
