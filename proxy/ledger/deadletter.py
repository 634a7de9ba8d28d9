"""Records the database refuses for what is in them, set aside so that nothing else waits.

A refused batch is bisected until each refusal is one record alone (store_or_set_aside):
every other record lands, and the refused ones go to a dead-letter file beside the
journal (`<journal>/dead-letter/dead-*.jsonl`, journal lines, FILE_MODE), written and
fsynced before their journal segment may be deleted. An outage is not a refusal: it is
raised with nothing set aside, and the whole batch waits and is tried again.
`llmmeter ledger retry` (retry()) imports dead letters again and keeps what still fails;
like a journal segment, a dead-letter file names its ledger, and another ledger's is moved
aside to `foreign/`, never imported.
Each process appends to a file of its own and holds a flock on it, as on its segments,
so a retry only ever takes files whose writer is done with them.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import orjson

from proxy.ledger.journal import SUFFIX, ReadStats, create_locked, encode, label_of, read_segment, set_aside
from proxy.ledger.record import Record
from proxy.ledger.store.base import Writer
from proxy.ledger.store.errors import RecordRefused, StoreUnavailable

log = logging.getLogger("llmmeter.ledger")

DIRECTORY = "dead-letter"


def dead_letter_dir(journal_dir: Path) -> Path:
    return journal_dir / DIRECTORY


class DeadLetters:
    """This process's dead-letter file, opened at the first refusal; `count` is what it set aside."""

    def __init__(self, directory: Path, ledger_id: str | None = None) -> None:
        self.directory = directory
        self.ledger_id = ledger_id  # what its file's name says the records were refused by
        self.count = 0
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._path: Path | None = None

    def add(self, refused: Sequence[tuple[Record, str]]) -> None:
        """Write and fsync the refused records, then log them once; StoreUnavailable when they cannot
        be kept (their batch then waits like any outage, so nothing is lost)."""
        if not refused:
            return
        lines = b"".join(_line(r) for r, _ in refused)
        with self._lock:
            try:
                if self._fd is None:
                    self._fd, self._path = create_locked(self.directory, "dead", self.ledger_id)
                    _sync_dir(self.directory)
                written = os.write(self._fd, lines)
                if written != len(lines):
                    raise OSError(f"short write ({written} of {len(lines)} bytes)")
                os.fsync(self._fd)
            except OSError as e:
                self._close_locked()  # a torn line is skipped on retry; the next add starts a new file
                raise StoreUnavailable(f"cannot set aside {len(refused)} refused ledger record(s) in "
                                       f"{self.directory}: {e}") from e
            self.count += len(refused)
            path = self._path
        record, reason = refused[0]
        log.error("the ledger database refused %d record(s), set aside in %s (llmmeter ledger retry imports "
                  "them again); first: %s: %s", len(refused), path, record.id, reason)

    def bind(self, directory: Path, ledger_id: str) -> None:
        """Where dead letters go and the ledger they belong to, once the database has said which."""
        with self._lock:
            if self._fd is None:  # a file already open stays this process's until it closes
                self.directory, self.ledger_id = directory, ledger_id

    @property
    def path(self) -> Path | None:
        """The file this process appends to, once it has one."""
        return self._path

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the flock: a retry may take the file now
            self._fd = None


def store_or_set_aside(writer: Writer, records: Sequence[Record], dead: DeadLetters) -> int:
    """Insert the batch; if the database refuses some record in it, every other record still
    lands and the refused ones are set aside. StoreUnavailable (an outage, or a dead letter
    that cannot be written) leaves them all to be tried again: inserts skip ids already in.
    Returns the rows added."""
    return store_chunks(writer, (records,), dead)


def store_chunks(writer: Writer, chunks: Iterable[Sequence[Record]], dead: DeadLetters) -> int:
    """As store_or_set_aside, for the batches of a whole file: what is refused is set aside once
    all went through, so an outage midway sets nothing aside twice when the file is read again."""
    refused: list[tuple[Record, str]] = []
    added = sum(_bisect(writer, chunk, refused) for chunk in chunks)
    dead.add(refused)
    return added


def _bisect(writer: Writer, records: Sequence[Record], refused: list[tuple[Record, str]]) -> int:
    # Halves, not one by one: a batch with one bad record costs ~2 log2(n) transactions, not n.
    try:
        return writer.insert_many(records)
    except RecordRefused as e:
        if len(records) == 1:
            refused.append((records[0], str(e)))
            return 0
    mid = len(records) // 2
    return _bisect(writer, records[:mid], refused) + _bisect(writer, records[mid:], refused)


@dataclass(slots=True)
class RetryStats:
    files: int = 0  # dead-letter files read and removed
    records: int = 0  # records in them
    inserted: int = 0  # of those, rows the database did not have yet
    refused: int = 0  # refused again: kept in a new dead-letter file
    skipped_lines: int = 0  # torn or unreadable lines
    busy: int = 0  # files a live process still writes
    foreign: int = 0  # files of another ledger, moved aside to foreign/

    def summary(self) -> str:
        aside = f"; {self.foreign} file(s) of another ledger set aside" if self.foreign else ""
        return (f"{self.records} dead-letter record(s) from {self.files} file(s): {self.inserted} imported, "
                f"{self.records - self.inserted - self.refused} already in the ledger, {self.refused} refused "
                f"again and kept; {self.skipped_lines} unreadable line(s) skipped; {self.busy} file(s) in use{aside}")


def retry(writer: Writer, directories: Sequence[Path], batch_size: int, ledger_id: str | None = None) -> RetryStats:
    """Import every dead-letter file of this ledger no live process holds, from the folders given; what is
    refused again goes to a new one in the first."""
    stats = RetryStats()
    again = DeadLetters(directories[0], ledger_id)
    try:
        for path in sorted(p for d in directories for p in d.glob(f"*{SUFFIX}")):
            _retry_file(writer, path, again, batch_size, stats)
    finally:
        again.close()
    stats.refused = again.count
    return stats


def _retry_file(writer: Writer, path: Path, again: DeadLetters, batch_size: int, stats: RetryStats) -> None:
    if path == again.path:  # the file this retry itself writes
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            stats.busy += 1
            return
        label = label_of(path)
        if label is not None and again.ledger_id is not None and label != again.ledger_id:
            set_aside(path, f"dead letters refused by ledger {label}, not by this ledger {again.ledger_id}: "
                            "retry refused")
            stats.foreign += 1
            return
        read = ReadStats()
        records = list(read_segment(fd, read))
        # An outage midway leaves the file as it was, to try again.
        inserted = store_chunks(writer, (records[at:at + batch_size] for at in range(0, len(records), batch_size)),
                                again)
        os.unlink(path)  # still under our flock
        stats.files += 1
        stats.records += read.records
        stats.inserted += inserted
        stats.skipped_lines += read.skipped_lines
    finally:
        os.close(fd)


def _line(record: Record) -> bytes:
    """The journal line, or, for a record with no faithful JSON form, the nearest one. A set-aside
    record's budget reservation was released when it was set aside: its copy names no lease, so
    a later `ledger retry` settles nothing a second time."""
    if record.budget_leases:
        record = replace(record, budget_leases=None)
    try:
        return encode(record)
    except TypeError:
        d = record.to_json_dict()
        for k, v in d.items():
            d[k] = _printable(v)
        return orjson.dumps(d, default=str, option=orjson.OPT_APPEND_NEWLINE)


def _printable(v: object) -> object:
    if isinstance(v, str):  # a lone surrogate has no UTF-8: keep the rest of the text
        return v.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if isinstance(v, list):
        return [_printable(x) for x in v]
    if isinstance(v, int) and not isinstance(v, bool) and not -(2**63) <= v < 2**64:
        return str(v)
    return v


def _sync_dir(directory: Path) -> None:
    # The new file's name must survive a crash as well as its lines.
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
