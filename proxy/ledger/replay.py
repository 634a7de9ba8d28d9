"""At start, every journal segment whose writer is gone goes into the database, then away.

Only this ledger's: a segment whose name gives another ledger's id is moved aside to
`foreign/` beside it, never imported (the same records in another database would be
counted twice, or counted where they never happened). A segment with no id in its name was
written before ledgers had ids: it is taken as the replaying ledger's, once, and logged.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from proxy.ledger.deadletter import DeadLetters, store_chunks
from proxy.ledger.journal import SUFFIX, ReadStats, label_of, read_segment, set_aside
from proxy.ledger.record import Record
from proxy.ledger.store.base import Writer

log = logging.getLogger("llmmeter.ledger")


@dataclass(slots=True)
class ReplayStats:
    segments: int = 0  # segment files imported and deleted
    records: int = 0  # whole records read from them
    inserted: int = 0  # of those, rows the database did not have yet
    skipped_lines: int = 0  # torn or unreadable lines
    busy: int = 0  # segments a live writer still holds
    foreign: int = 0  # segments of another ledger, moved aside to foreign/
    unlabelled: int = 0  # of the segments imported, those written before ledgers had ids
    folders: set[Path] = field(default_factory=set)  # where the segments imported were


def replay(directories: Sequence[Path], ledger_id: str, writer: Writer, batch_size: int,
           dead: DeadLetters) -> ReplayStats:
    """Import this ledger's segments from `directories` in creation order; ids already in the database
    are ignored, records it refuses are set aside, so no record can make a start fail."""
    stats = ReplayStats()
    for path in _segments(directories):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue  # another worker imported it first
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                stats.busy += 1
                continue
            if not _still_there(path, fd):
                continue
            label = label_of(path)
            if label is not None and label != ledger_id:
                set_aside(path, f"journal segment written for ledger {label}, not for this ledger {ledger_id}: "
                                f"replay refused (moved into the journal of an llmmeter serving ledger {label}, "
                                "it lands there)")
                stats.foreign += 1
                continue
            if label is None:
                log.warning("journal segment %s names no ledger (written before ledgers had ids): taken as this "
                            "ledger's (%s), the one replaying it, and imported once", path, ledger_id)
                stats.unlabelled += 1
            read = ReadStats()
            stats.inserted += store_chunks(writer, batches(read_segment(fd, read), batch_size), dead)
            stats.records += read.records
            stats.skipped_lines += read.skipped_lines
            if read.skipped_lines:
                log.warning("journal segment %s: skipped %d torn or unreadable line(s)", path.name, read.skipped_lines)
            os.unlink(path)  # still under our flock, so nobody takes it twice
            stats.segments += 1
            stats.folders.add(path.parent)
        finally:
            os.close(fd)
    if stats.records:
        log.info("ledger journal replayed: %d records from %d segments, %d new", stats.records, stats.segments,
                 stats.inserted)
    return stats


def batches(records: Iterable[Record], size: int) -> Iterator[list[Record]]:
    it = iter(records)
    while batch := list(islice(it, size)):
        yield batch


def _segments(directories: Sequence[Path]) -> list[Path]:
    """The segment files in the folders (not below them), oldest first: names begin with the time."""
    found: list[Path] = []
    for directory in directories:
        try:
            found += (directory / e.name for e in os.scandir(directory) if e.name.endswith(SUFFIX) and e.is_file())
        except FileNotFoundError:
            continue
        except OSError as e:
            log.error("ledger journal %s cannot be read: %s", directory, e)
    return sorted(found, key=lambda p: p.name)


def _still_there(path: Path, fd: int) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except OSError:
        return False
