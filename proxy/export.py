"""`llmmeter export`: per-request ledger rows as CSV or JSON Lines (SPEC "Ledger").

Values are written exactly: money as a decimal string from integer units, times in
RFC 3339 UTC. Rows are streamed, so an export of any size runs in constant memory.
`Output` is where `export --out` and `report --out` write: never the ledger, and all or nothing.
"""

from __future__ import annotations

import contextlib
import csv
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Literal, TextIO
from zoneinfo import ZoneInfo

import orjson

from pricing import format_usd
from proxy.errors import OutputError
from proxy.ledger.record import EXPORT_COLUMNS, Record

_PROGRESS_EVERY = 1000
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})?$")
_WHEN_HELP = "use YYYY-MM-DD or an RFC 3339 time such as 2026-11-01T00:00:00Z"
# Years a command-line time may name: far enough from datetime's own limits (1 and 9999)
# that no zone offset, next day or next month overflows.
FIRST_YEAR, LAST_YEAR = 1900, 9998


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
        check_year(d.year, repr(s))
        return datetime(d.year, d.month, d.day, tzinfo=tz)
    if not _DATETIME.match(text):
        raise ValueError(f"invalid time {s!r}: {_WHEN_HELP}")
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as e:
        raise ValueError(f"invalid time {s!r}: {e}") from None
    check_year(t.year, repr(s))
    return t if t.tzinfo is not None else t.replace(tzinfo=tz)


def check_year(year: int, what: str) -> None:
    if not FIRST_YEAR <= year <= LAST_YEAR:
        raise ValueError(f"{what} is out of range: use a year from {FIRST_YEAR} to {LAST_YEAR}")


def _csv_text(v: str | int | bool) -> str | int:
    if isinstance(v, bool):
        return "true" if v else "false"
    return v


def _utc(t: datetime) -> datetime:
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class Output:
    """A checked `--out`: written through a temporary file in the same directory, created
    0600 (reports and exports name tenants and end users), renamed into place when whole."""

    path: Path  # resolved: a symlinked --out updates its target
    shown: str  # as given, for messages

    @contextlib.contextmanager
    def open(self) -> Iterator[TextIO]:
        if self.path.exists() and not self.path.is_file():  # /dev/stdout, a FIFO: nothing to clobber
            with self._failing(), self.path.open("w", encoding="utf-8", newline="") as f:
                yield f
            return
        with self._failing():
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        try:
            with self._failing():
                with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
                    yield f
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    @contextlib.contextmanager
    def _failing(self) -> Iterator[None]:
        try:
            yield
        except OSError as e:
            raise OutputError(f"--out {self.shown}: cannot write: {e.strerror or e}; "
                              f"{self.shown} is left as it was") from None


def check_output(out: Path, ledger_files: Iterable[Path], journal_dir: Path) -> Output:
    """Refuse an `--out` that is the ledger, one of its files (-wal, -shm) or anything in its
    journal, by path and, for files that exist, by device and inode (hard links, bind mounts)."""
    shown = str(out)
    try:
        target = out.resolve()
    except (OSError, RuntimeError, ValueError) as e:  # a symlink loop, a NUL byte
        raise OutputError(f"--out {shown}: not a usable path: {e}") from None
    if target.is_dir():
        raise OutputError(f"--out {shown}: is a directory; name a file to write")
    if not target.parent.is_dir():
        raise OutputError(f"--out {shown}: the directory {target.parent} does not exist")
    mine = _identity(target)
    for f in ledger_files:
        if target == f.resolve() or (mine is not None and mine == _identity(f)):
            raise OutputError(f"--out {shown}: that is the ledger ({f}); writing there would destroy it")
    journal = journal_dir.resolve()
    journal_id = _identity(journal)
    inside = target.is_relative_to(journal) or (journal_id is not None and _identity(target.parent) == journal_id)
    if inside or (mine is not None and mine in _identities(journal)):
        raise OutputError(f"--out {shown}: that is inside the ledger's journal ({journal_dir}); "
                          "writing there would destroy records")
    return Output(target, shown)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _identities(directory: Path) -> set[tuple[int, int]]:
    found: set[tuple[int, int]] = set()
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):  # a segment sealed and removed meanwhile
                st = entry.stat()
                found.add((st.st_dev, st.st_ino))
    return found
