"""UTC times as llmmeter writes them (RFC 3339, `Z`) and the times a command line may name.

Every place that writes a UTC time goes through `rfc3339`, so the ledger's journal, the
export and the report agree on one spelling.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from typing import Literal
from zoneinfo import ZoneInfo

from proxy.errors import ConfigError

# How many fraction digits: none, always 3 or 6, Python's own choice (6 when there is a
# fraction), or as few as say it exactly.
Precision = Literal["seconds", "milliseconds", "microseconds", "auto", "shortest"]

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})?$")
_WHEN_HELP = "use YYYY-MM-DD or an RFC 3339 time such as 2026-11-01T00:00:00Z"
# Years a command-line time may name: far enough from datetime's own limits (1 and 9999)
# that no zone offset, next day or next month overflows.
FIRST_YEAR, LAST_YEAR = 1900, 9998


def utc(t: datetime) -> datetime:
    """`t` in UTC; a naive time is taken to be UTC already."""
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def rfc3339(t: datetime, precision: Precision = "shortest") -> str:
    """UTC with a `Z`, e.g. 2026-11-03T14:05:09.123Z (sub-unit digits are cut, not rounded)."""
    t = utc(t)
    whole = t.replace(tzinfo=None, microsecond=0).isoformat()  # four-digit years, as isoformat pads them
    if precision == "milliseconds":
        return f"{whole}.{t.microsecond // 1000:03d}Z"
    if precision == "microseconds" or (precision == "auto" and t.microsecond):
        return f"{whole}.{t.microsecond:06d}Z"
    if precision == "shortest" and t.microsecond:
        return f"{whole}.{t.microsecond:06d}".rstrip("0") + "Z"
    return whole + "Z"


def parse_rfc3339(s: str) -> datetime:
    """An ISO/RFC 3339 time as llmmeter wrote it; without an offset it is UTC."""
    t = datetime.fromisoformat(s.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def parse_when(s: str, tz: ZoneInfo) -> datetime:
    """`--from`/`--to`: YYYY-MM-DD is midnight in `tz`; an RFC 3339 time is taken as given
    (without an offset it is a wall time in `tz`)."""
    text = s.strip().upper()
    if _DATE.match(text):
        try:
            d = date.fromisoformat(text)
        except ValueError as e:
            raise ConfigError(f"invalid date {s!r}: {e}") from None
        check_year(d.year, repr(s))
        return datetime(d.year, d.month, d.day, tzinfo=tz)
    if not _DATETIME.match(text):
        raise ConfigError(f"invalid time {s!r}: {_WHEN_HELP}")
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as e:
        raise ConfigError(f"invalid time {s!r}: {e}") from None
    check_year(t.year, repr(s))
    return t if t.tzinfo is not None else t.replace(tzinfo=tz)


def check_year(year: int, what: str) -> None:
    if not FIRST_YEAR <= year <= LAST_YEAR:
        raise ConfigError(f"{what} is out of range: use a year from {FIRST_YEAR} to {LAST_YEAR}")
