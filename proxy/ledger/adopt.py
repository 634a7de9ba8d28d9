"""`llmmeter ledger adopt`: import journal segments that were set aside as another ledger's.

A start replays only the segments written for its own ledger; one written for another
ledger id goes to `foreign/` beside it (proxy/ledger/replay.py). That happens, for example,
when the ledger file was deleted while `serve` ran and a new file now stands at the path:
the records journaled meanwhile name the old ledger. Adopting them is the operator's
decision, so it is a command and never automatic.

Adoption goes through the importer's own path (Writer.insert_many, by way of the dead-letter
bisection): an id the ledger already holds is skipped, so adopting twice imports nothing
the second time and the rollups count each record once. An adopted segment is moved into
`foreign/adopted/`, where neither a replay nor another adopt reads it; it can be deleted.
Budget reservations named in a record were the other ledger's: they are dropped, not settled.

A record whose UTC month was pruned (`llmmeter ledger prune`) is not imported: the month's
rows are gone, so whether the rollups already count it cannot be told, and importing it could
bill it twice. A segment holding such records stays in `foreign/`, and the summary says how
many records that is.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from proxy.errors import ConfigError
from proxy.ledger.deadletter import DeadLetters, store_chunks
from proxy.ledger.journal import DIR_MODE, FOREIGN, SUFFIX, ReadStats, read_segment
from proxy.ledger.record import Record
from proxy.ledger.replay import batches
from proxy.ledger.store.base import Writer

log = logging.getLogger("llmmeter.ledger")

ADOPTED = "adopted"  # inside foreign/: segments already adopted, never read again
SEGMENT_PREFIX = "segment-"  # journal.create_locked's kind; dead-letter files start otherwise
COMMAND = "llmmeter ledger adopt"


@dataclass(slots=True)
class AdoptStats:
    segments: int = 0  # segments imported and moved to foreign/adopted/
    records: int = 0  # whole records read from them
    inserted: int = 0  # of those, rows the ledger did not have yet
    skipped_lines: int = 0  # torn or unreadable lines
    busy: int = 0  # segments a live process still holds
    pruned: int = 0  # records of pruned months, left out (their segments stay in foreign/)
    refused: int = 0  # records the database refused, set aside as dead letters (`llmmeter ledger retry`)

    def summary(self) -> str:
        return (f"adopted {self.segments} segment(s): {self.records} record(s), {self.inserted} new, "
                f"{self.records - self.inserted - self.pruned - self.refused} already in the ledger; "
                + (f"{self.refused} refused by the database and set aside (llmmeter ledger retry); "
                   if self.refused else "")
                + f"{self.skipped_lines} unreadable line(s) skipped; {self.busy} segment(s) in use, left for later"
                + (f"; {self.pruned} record(s) of pruned months left out (whether they are counted cannot be "
                   "told once a month's rows are pruned), their segments left in foreign/" if self.pruned else ""))


def foreign_segments(journal_dirs: Iterable[Path]) -> list[Path]:
    """The segments waiting in the `foreign/` folder of each journal folder, oldest first."""
    found: list[Path] = []
    for d in journal_dirs:
        try:
            entries = list(os.scandir(d / FOREIGN))
        except OSError:
            continue
        found += (Path(e.path) for e in entries if _is_segment_name(e.name) and e.is_file(follow_symlinks=False))
    return sorted(found, key=lambda p: p.name)


def check_segments(paths: Sequence[Path]) -> list[Path]:
    """The segments an operator named, each a journal segment file; ConfigError otherwise."""
    out = []
    for p in paths:
        if not _is_segment_name(p.name):
            raise ConfigError(f"{p}: not a journal segment (its name is segment-....jsonl)")
        if not p.is_file():
            raise ConfigError(f"{p}: no such segment file")
        if p.parent.name == ADOPTED:
            raise ConfigError(f"{p}: already adopted")
        out.append(p)
    return out


def adopt(paths: Sequence[Path], writer: Writer, batch_size: int, dead: DeadLetters,
          pruned: frozenset[str] = frozenset()) -> AdoptStats:
    """`pruned`: the UTC months (YYYY-MM) whose per-request rows were pruned."""
    stats = AdoptStats()
    for path in paths:
        _adopt_one(path, writer, batch_size, dead, stats, pruned)
    if stats.segments:
        log.info("%s", stats.summary())
    return stats


def _adopt_one(path: Path, writer: Writer, batch_size: int, dead: DeadLetters, stats: AdoptStats,
               pruned: frozenset[str]) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return  # another adopt took it first
    try:
        try:
            # The flock a journal writer holds while it writes, and a replay or adopt while it reads.
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            stats.busy += 1
            return
        if not _still_there(path, fd):
            return
        read = ReadStats()
        left = [0]
        kept = _outside(_unleased(read_segment(fd, read)), pruned, left)
        set_aside = dead.count
        stats.inserted += store_chunks(writer, batches(kept, batch_size), dead)
        stats.refused += dead.count - set_aside
        stats.records += read.records
        stats.skipped_lines += read.skipped_lines
        stats.pruned += left[0]
        if left[0]:
            return  # kept in foreign/: its records of pruned months are not adopted, nor lost
        done = path.parent / ADOPTED
        done.mkdir(mode=DIR_MODE, exist_ok=True)
        os.rename(path, done / path.name)  # under our flock: nobody reads it twice
        stats.segments += 1
    finally:
        os.close(fd)


def _outside(records: Iterator[Record], pruned: frozenset[str], left: list[int]) -> Iterator[Record]:
    for r in records:
        if pruned and f"{r.start.year:04d}-{r.start.month:02d}" in pruned:
            left[0] += 1
        else:
            yield r


def _unleased(records: Iterator[Record]) -> Iterator[Record]:
    # The leases were another ledger's reservations: none of them is this ledger's to settle.
    for r in records:
        yield replace(r, budget_leases=None) if r.budget_leases else r


def _is_segment_name(name: str) -> bool:
    return name.startswith(SEGMENT_PREFIX) and name.endswith(SUFFIX)


def _still_there(path: Path, fd: int) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except OSError:
        return False
