"""`llmmeter export`: per-request ledger rows as CSV or JSON Lines (SPEC "Ledger").

Values are written exactly: money as a decimal string from integer units, times in
RFC 3339 UTC. Rows are streamed, so an export of any size runs in constant memory.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterable
from datetime import UTC, date, datetime
from typing import Literal, TextIO
from zoneinfo import ZoneInfo

import orjson

from pricing import format_usd
from proxy.record import EXPORT_COLUMNS, Record

_PROGRESS_EVERY = 1000
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})?$")
_WHEN_HELP = "use YYYY-MM-DD or an RFC 3339 time such as 2026-11-01T00:00:00Z"


def write_export(rows: Iterable[Record], fmt: Literal["csv", "jsonl"], out: TextIO,
                 progress: Callable[[int], None] | None = None) -> int:
    """Write every row in EXPORT_COLUMNS order; returns how many were written."""
    if fmt not in ("csv", "jsonl"):
        raise ValueError(f"unknown export format {fmt!r} (csv or jsonl)")
    n = 0
    writer = csv.writer(out, lineterminator="\n") if fmt == "csv" else None
    if writer is not None:
        writer.writerow(EXPORT_COLUMNS)
    for record in rows:
        values = export_values(record)
        if writer is not None:
            writer.writerow(["" if v is None else _csv_text(v) for v in values])
        else:
            out.write(orjson.dumps(dict(zip(EXPORT_COLUMNS, values, strict=True)),
                                   option=orjson.OPT_APPEND_NEWLINE).decode())
        n += 1
        if progress is not None and n % _PROGRESS_EVERY == 0:
            progress(n)
    if progress is not None:
        progress(n)
    return n


def export_values(r: Record) -> list[str | int | bool | None]:
    """One record's values in EXPORT_COLUMNS order; None where the ledger has nothing."""
    values: list[str | int | bool | None] = []
    for name in EXPORT_COLUMNS:
        if name == "start":
            values.append(rfc3339_ms(r.start))
        elif name == "cost_usd":
            values.append(None if r.cost_units is None else usd(r.cost_units))
        elif name == "price_effective_from":
            values.append(None if r.price_effective_from is None else rfc3339(r.price_effective_from))
        else:
            values.append(getattr(r, name))
    return values


usd = format_usd  # exact dollars from ledger units, plain notation


def rfc3339_ms(t: datetime) -> str:
    """UTC with milliseconds, e.g. 2026-11-03T14:05:09.123Z (sub-millisecond digits are cut, not rounded)."""
    t = _utc(t)
    return f"{t:%Y-%m-%dT%H:%M:%S}.{t.microsecond // 1000:03d}Z"


def rfc3339(t: datetime) -> str:
    """UTC, with a fraction only when there is one."""
    t = _utc(t)
    frac = f".{t.microsecond:06d}".rstrip("0") if t.microsecond else ""
    return f"{t:%Y-%m-%dT%H:%M:%S}{frac}Z"


def parse_when(s: str, tz: ZoneInfo) -> datetime:
    """`--from`/`--to`: YYYY-MM-DD is midnight in `tz`; an RFC 3339 time is taken as given
    (without an offset it is a wall time in `tz`)."""
    text = s.strip().upper()
    if _DATE.match(text):
        try:
            d = date.fromisoformat(text)
        except ValueError as e:
            raise ValueError(f"invalid date {s!r}: {e}") from None
        return datetime(d.year, d.month, d.day, tzinfo=tz)
    if not _DATETIME.match(text):
        raise ValueError(f"invalid time {s!r}: {_WHEN_HELP}")
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as e:
        raise ValueError(f"invalid time {s!r}: {e}") from None
    return t if t.tzinfo is not None else t.replace(tzinfo=tz)


def _csv_text(v: str | int | bool) -> str | int:
    if isinstance(v, bool):
        return "true" if v else "false"
    return v


def _utc(t: datetime) -> datetime:
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
