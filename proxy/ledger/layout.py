"""Where a ledger keeps its journal and dead letters on disk, and whose leftovers it replays.

- A SQLite ledger, or any ledger given `ledger.journal_dir`: that one folder (by default
  `journal/` beside the database file), shared by the workers of one `serve --workers N`
  (each segment is flock'd by its writer); dead letters in its `dead-letter/`.
- A PostgreSQL ledger without `ledger.journal_dir`: each process writes its own folder,
  `./data/journal/<ledger id>/<host>-<pid>/`, so replicas that share a host (or a volume)
  never share a journal folder; the ledger's dead letters go to
  `./data/journal/<ledger id>/dead-letter/`.

Why host and pid rather than host and port: the pid is unique among a host's live
processes (the host name keeps two containers' pid 1 apart), needs nothing from the caller,
and `serve --workers N` (one port, N processes) and `llmmeter migrate` (no port) have one.
A restart gets a new pid, so a start replays every folder of its own ledger, not only the
one it writes: it takes a segment only when no live process holds its flock, so a live
replica's segments stay with it, and a dead one's (or its own former self's) are imported.
Folders emptied that way are removed. Another ledger's folder (an earlier database served
from the same working directory) is never read: a warning says it is there. Segments in
`./data/journal` itself are from an llmmeter before ledger ids, and are replayed once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from proxy.ledger.deadletter import DIRECTORY as DEAD_LETTERS
from proxy.ledger.journal import FOREIGN, SUFFIX

log = logging.getLogger("llmmeter.ledger")

_LEDGER_DIR = re.compile(r"[0-9a-f]{32}\Z")
_NOT_A_JOURNAL = (DEAD_LETTERS, FOREIGN)


def default_replica() -> str:
    """`<host>-<pid>`: unique among the processes that may share a journal root."""
    host = re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()) or "host"
    return f"{host}-{os.getpid()}"


@dataclass(frozen=True, slots=True)
class Layout:
    ledger_id: str  # the ledger every segment written here names
    journal: Path  # where this process writes its segments
    dead_letters: Path  # where it sets aside what the database refuses
    ledger_dir: Path | None = None  # per-process layout: every process's folder of this ledger is in here
    root: Path | None = None  # per-process layout: the folder earlier llmmeters wrote, and other ledgers' folders

    def replay_dirs(self) -> list[Path]:
        """Folders whose leftover segments are this ledger's: its own first, then every other
        process's of the same ledger, then the one llmmeters before ledger ids wrote."""
        dirs = [self.journal]
        if self.ledger_dir is not None:
            dirs += [d for d in _subdirs(self.ledger_dir) if d != self.journal and d.name not in _NOT_A_JOURNAL]
        if self.root is not None:
            dirs.append(self.root)
        return dirs

    def dead_letter_dirs(self) -> list[Path]:
        """This ledger's dead letters, and those llmmeters before ledger ids left in the root."""
        return [self.dead_letters] + ([self.root / DEAD_LETTERS] if self.root is not None else [])

    def warn_others(self) -> None:
        """Warn about other ledgers' journal folders under the root: never read, never imported here."""
        if self.root is None:
            return
        ledger_id = self.ledger_id
        for d in _subdirs(self.root):
            if d.name != ledger_id and _LEDGER_DIR.match(d.name):
                n = sum(1 for sub in _subdirs(d) if sub.name not in _NOT_A_JOURNAL for _ in sub.glob(f"*{SUFFIX}"))
                if n:
                    log.warning("journal folder %s holds %d segment(s) of ledger %s, not of this ledger %s: "
                                "left alone (an llmmeter serving that ledger imports them)", d, n, d.name, ledger_id)

    def tidy(self, replayed: Iterable[Path]) -> None:
        """Remove the other processes' folders of this ledger that replay emptied. Only those: a
        folder with nothing in it yet may be a replica's that is starting at this moment."""
        if self.ledger_dir is None:
            return
        for d in set(replayed):
            if d.parent == self.ledger_dir and d != self.journal:
                with contextlib.suppress(OSError):  # not empty (foreign/, a new segment), or gone: either is fine
                    d.rmdir()


def layout(journal_dir: Path | None, default: Path, per_process: bool, ledger_id: str, replica: str) -> Layout:
    """The layout for a ledger: `journal_dir` as configured (None: the store's default), whether the
    store's default is per process (PostgreSQL), the ledger's id and this process's name."""
    if journal_dir is not None or not per_process:
        where = journal_dir if journal_dir is not None else default
        return Layout(ledger_id, where, where / DEAD_LETTERS)
    ledger_dir = default / ledger_id
    return Layout(ledger_id, ledger_dir / replica, ledger_dir / DEAD_LETTERS, ledger_dir, default)


def _subdirs(directory: Path) -> list[Path]:
    try:
        return sorted(Path(e.path) for e in os.scandir(directory) if e.is_dir(follow_symlinks=False))
    except OSError:
        return []
