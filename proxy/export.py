"""`llmmeter export`: per-request ledger rows as CSV or JSON Lines (SPEC "Ledger").

Values are written exactly: money as a decimal string from integer units, times in
RFC 3339 UTC. A CSV text cell a client chose never opens as a spreadsheet formula
(`spreadsheet_text`, used by every CSV llmmeter writes). Rows are streamed, so an export
of any size runs in constant memory.
`Output` is where `export --out` and `report --out` write: never the ledger, and all or nothing.
"""

from __future__ import annotations

import contextlib
import csv
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TextIO

import orjson

from pricing import format_usd
from proxy.errors import ConfigError, OutputError
from proxy.ledger.record import EXPORT_COLUMNS, Record
from proxy.times import check_year, parse_when, rfc3339

if TYPE_CHECKING:
    from _csv import Writer as CsvWriter

__all__ = ["EXPORT_COLUMNS", "FLAG_SEPARATOR", "Output", "check_output", "check_year", "csv_writer", "export_values",
           "parse_when", "spreadsheet_text", "write_export"]

_PROGRESS_EVERY = 1000
# What a spreadsheet takes for the start of a formula (OWASP, "CSV Injection").
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# Export columns that hold numbers or times written by llmmeter, never a client's text.
_NOT_TEXT = frozenset({"start", "price_effective_from", "cost_usd", "provider_cost_usd", "flags"})
# A record's flags in one export cell: llmmeter's own names ([a-z0-9_]), joined by a character
# that is neither a CSV nor a spreadsheet-locale separator, so the cell never needs quoting.
FLAG_SEPARATOR = "|"


def write_export(rows: Iterable[Record], fmt: Literal["csv", "jsonl"], out: TextIO,
                 progress: Callable[[int], None] | None = None) -> int:
    """Write every row in EXPORT_COLUMNS order; returns how many were written."""
    if fmt not in ("csv", "jsonl"):
        raise ConfigError(f"unknown export format {fmt!r} (csv or jsonl)")
    n = 0
    writer = csv_writer(out) if fmt == "csv" else None
    if writer is not None:
        writer.writerow(EXPORT_COLUMNS)
    text = [name not in _NOT_TEXT for name in EXPORT_COLUMNS]
    for record in rows:
        values = export_values(record)
        if writer is not None:
            writer.writerow([_csv_cell(v, t) for v, t in zip(values, text, strict=True)])
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
            values.append(rfc3339(r.start, "milliseconds"))
        elif name == "cost_usd":
            values.append(None if r.cost_units is None else format_usd(r.cost_units))
        elif name == "price_effective_from":
            values.append(None if r.price_effective_from is None else rfc3339(r.price_effective_from))
        elif name == "provider_cost_usd":
            values.append(None if r.provider_cost_units is None else format_usd(r.provider_cost_units))
        elif name == "flags":
            values.append(FLAG_SEPARATOR.join(r.flags))
        else:
            values.append(getattr(r, name))
    return values


def csv_writer(out: TextIO) -> CsvWriter:
    """A csv.writer for every CSV llmmeter writes: rows end in LF, and a cell holding a CR or LF is quoted.

    Python 3.11's csv quotes only for the characters of its line terminator, so with "\\n" a
    bare CR inside a cell would reach the file and a spreadsheet would start a new row there
    (where a client's text could begin a formula). Rows are written ending "\\r\\n" and
    `_LineFeed` makes that "\\n" again.
    """
    return csv.writer(_LineFeed(out), lineterminator="\r\n")


class _LineFeed:
    def __init__(self, out: TextIO) -> None:
        self.out = out

    def write(self, line: str) -> int:  # csv.writer writes each row whole, ending "\r\n"
        return self.out.write(line[:-2] + "\n")


def spreadsheet_text(value: str) -> str:
    """A text cell a spreadsheet shows as text: one that would start a formula gets a leading `'`."""
    return "'" + value if value.startswith(_FORMULA_START) else value


def _csv_cell(v: str | int | bool | None, text: bool) -> str | int:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str) and text:
        return spreadsheet_text(v)
    return v


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
