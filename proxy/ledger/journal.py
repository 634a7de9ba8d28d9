"""Append-only journal segments: the record is durable here before the client's last byte.

Each process writes its own segment files and holds an exclusive flock on every segment
it still owns, so a replaying process only ever takes files whose writer is gone. A
segment is deleted once everything written to it is in the database. Its file name names
the ledger it was written for (`segment-<time>-<pid>-<random>.<ledger id>.jsonl`), so it is
never replayed into another one (proxy/ledger/replay.py); a name without one is from an
llmmeter that predates ledger ids. All methods take
the journal's lock; none of them raises into the request path. Segments are created
FILE_MODE (0640: owner read-write, group read; the umask may narrow it) in a directory
made DIR_MODE: records hold end_user.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

from proxy.ledger.record import Record

log = logging.getLogger("llmmeter.ledger")

SUFFIX = ".jsonl"
FOREIGN = "foreign"  # where segments and dead letters of another ledger are set aside, never imported
_LABEL = re.compile(r"\.([0-9a-f]{32})\.jsonl\Z")
SEGMENT_BYTES = 64 * 1024 * 1024
FILE_MODE = 0o640
DIR_MODE = 0o750
# One line per record; datetimes as RFC 3339, naive ones taken as UTC.
JOURNAL_JSON = orjson.OPT_APPEND_NEWLINE | orjson.OPT_UTC_Z | orjson.OPT_NAIVE_UTC
# Integer fields a line may carry as a decimal string: orjson writes no integer beyond 64 bits,
# and a cost at the caps (4 x 10^19 units, pricing/calculator.py) is beyond them.
_WIDE = ("cost_units", "input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens",
         "reasoning_tokens", "duration_ms", "ttft_ms", "code")
REOPEN_AFTER_S = 1.0  # how soon a failed journal is tried again
CHECK_EVERY_S = 0.5  # how often the open segment is checked to still be on disk
_READ_CHUNK = 1 << 20
# Far beyond any record's line (a few KiB: its free text is cut to 256 characters), and small
# enough that reading a file never holds more than this and a chunk.
MAX_LINE_BYTES = 1 << 20


@dataclass(eq=False, slots=True)
class Segment:
    path: Path
    fd: int
    inode: int
    size: int = 0
    outstanding: int = 0  # records written here that memory still holds uncommitted
    dropped: int = 0  # records written here that memory let go of: re-read from the file


@dataclass(slots=True)
class ReadStats:
    records: int = 0
    skipped_lines: int = 0


class Journal:
    def __init__(self, directory: Path, fsync: bool = False, segment_bytes: int = SEGMENT_BYTES,
                 ledger_id: str | None = None) -> None:
        self.directory = directory
        self.ledger_id = ledger_id  # what every segment's name says it was written for
        self.fsync = fsync
        self.segment_bytes = segment_bytes
        self.ok = True
        self.problem: str | None = None  # why the journal is down, while it is
        self._lock = threading.Lock()
        self._current: Segment | None = None
        self._sealed: list[Segment] = []
        self._retry_at = 0.0
        self._checked_at = 0.0
        self._closed = False

    def bind(self, directory: Path, ledger_id: str) -> None:
        """Where segments go and the ledger they name, once the database has said which it is;
        before the first open()."""
        with self._lock:
            self.directory, self.ledger_id = directory, ledger_id

    def open(self) -> bool:
        """Start a fresh segment; False (and `ok` False) when the directory cannot take one."""
        with self._lock:
            return self._open_locked()

    def write(self, lines: bytes, records: int, kept: bool) -> Segment | None:
        """One os.write of `records` whole lines; the segment they landed in, or None when they did not."""
        with self._lock:
            seg = self._current
            if seg is None:
                return None
            try:
                n = os.write(seg.fd, lines)
            except OSError as e:
                self._fail_locked(e)
                return None
            if n != len(lines):
                # A torn line can only be the segment's last: replay skips it, the next goes elsewhere.
                # Lines before it did land; memory keeps them all, and import skips duplicate ids.
                self._fail_locked(OSError(errno.ENOSPC, f"short write ({n} of {len(lines)} bytes)"))
                return None
            seg.size += n
            if kept:
                seg.outstanding += records
            else:
                seg.dropped += records
            if self.fsync:
                try:
                    os.fsync(seg.fd)
                except OSError as e:
                    self._fail_locked(e)
            if self._current is seg and seg.size >= self.segment_bytes:
                self._rotate_locked()
            return seg

    def release(self, segments: Iterable[Segment]) -> None:
        """Their records are committed from memory."""
        with self._lock:
            for seg in segments:
                seg.outstanding -= 1

    def maintain(self, drained: bool) -> list[Segment]:
        """Reopen after failure, notice a vanished segment; returns sealed segments ready to retire."""
        with self._lock:
            if self._closed:
                return []
            now = time.monotonic()
            seg = self._current
            if seg is None and now >= self._retry_at and self._open_locked():
                log.info("ledger journal %s is writable again", self.directory)
            elif seg is not None and now - self._checked_at >= CHECK_EVERY_S:
                self._checked_at = now
                if not _same_file(seg.path, seg.inode):
                    self._fail_locked(OSError(errno.ENOENT, f"{seg.path} was removed"))
            seg = self._current
            if seg is not None and seg.dropped and drained:
                self._rotate_locked()  # so the records memory let go of can be re-read from a closed file
            return [s for s in self._sealed if s.outstanding == 0]

    def discard(self, seg: Segment) -> None:
        """Everything in this sealed segment is in the database: delete it."""
        with self._lock:
            if seg in self._sealed:
                self._sealed.remove(seg)
            _remove(seg)

    def close(self) -> None:
        """Seal; delete what is fully committed, leave the rest on disk for the next replay."""
        with self._lock:
            self._closed = True
            if self._current is not None:
                self._sealed.append(self._current)
                self._current = None
            for seg in self._sealed:
                if seg.outstanding == 0 and seg.dropped == 0:
                    _remove(seg)
                else:
                    os.close(seg.fd)
            self._sealed = []

    # --- callers hold the lock ----------------------------------------------------------
    def _open_locked(self) -> bool:
        if self._closed:
            return False
        try:
            seg = _create(self.directory, self.ledger_id)
        except OSError as e:
            self._fail_locked(e)
            return False
        if self._current is not None:
            self._sealed.append(self._current)
        self._current = seg
        self.ok = True
        self.problem = None
        self._checked_at = time.monotonic()
        return True

    def _rotate_locked(self) -> None:
        old = self._current
        if self._open_locked() and old is not None:
            log.debug("ledger journal rotated past %s", old.path.name)

    def _fail_locked(self, e: OSError) -> None:
        if self.ok:
            log.error("ledger journal %s failed, records are held in memory only: %s", self.directory, e)
        self.ok = False
        self.problem = f"ledger journal {self.directory}: {e}"
        self._retry_at = time.monotonic() + REOPEN_AFTER_S
        if self._current is not None:
            self._sealed.append(self._current)
            self._current = None


def _create(directory: Path, ledger_id: str | None) -> Segment:
    fd, path = create_locked(directory, "segment", ledger_id)
    return Segment(path, fd, os.fstat(fd).st_ino)


def create_locked(directory: Path, kind: str, ledger_id: str | None) -> tuple[int, Path]:
    """A new FILE_MODE file `<kind>-<time>-<pid>-<random>.<ledger id>.jsonl`, open for appends and
    flock'd; the time first, so names sort in the order the files were made."""
    directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    label = f".{ledger_id}" if ledger_id is not None else ""
    path = directory / f"{kind}-{time.time_ns():020d}-{os.getpid()}-{secrets.token_hex(4)}{label}{SUFFIX}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd, path
    except OSError:
        os.close(fd)
        raise


def label_of(path: Path) -> str | None:
    """The ledger id a segment or dead-letter file names; None for one written before ids."""
    m = _LABEL.search(path.name)
    return m.group(1) if m else None


def set_aside(path: Path, reason: str) -> Path:
    """Move a file (flock'd by the caller) into `foreign/` beside it, where nothing imports it."""
    aside = path.parent / FOREIGN
    aside.mkdir(mode=DIR_MODE, exist_ok=True)
    target = aside / path.name
    os.rename(path, target)
    log.error("%s: %s; moved to %s, not imported", path, reason, aside)
    return target


def encode(record: Record) -> bytes:
    """The record's journal line; TypeError when it has no faithful JSON form."""
    try:
        return orjson.dumps(record, option=JOURNAL_JSON)
    except TypeError:
        d = record.to_json_dict()  # a wide integer (a cost at the caps) goes as a decimal string
        for name in _WIDE:
            v = d.get(name)
            if type(v) is int and not -(2**63) <= v < 2**64:
                d[name] = str(v)
        return orjson.dumps(d, option=JOURNAL_JSON)


def _remove(seg: Segment) -> None:
    # Unlink while the flock is held, so no replayer picks the file up in between.
    try:
        if _same_file(seg.path, seg.inode):
            os.unlink(seg.path)
    except OSError as e:
        log.warning("could not delete imported journal segment %s: %s", seg.path, e)
    finally:
        os.close(seg.fd)


def _same_file(path: Path, inode: int) -> bool:
    try:
        return os.stat(path).st_ino == inode
    except OSError:
        return False


def read_segment(fd: int, stats: ReadStats) -> Iterator[Record]:
    """Every whole record in the file; a torn, unreadable or overlong line is skipped and counted.

    A line longer than MAX_LINE_BYTES is no record llmmeter wrote (its text fields are cut to
    256 characters): it is skipped as it is read, never held, so a crafted file with one
    endless line costs neither memory nor time beyond its reading."""
    offset, tail, overlong = 0, b"", False
    while chunk := os.pread(fd, _READ_CHUNK, offset):
        offset += len(chunk)
        lines = chunk.split(b"\n")
        rest = lines.pop()  # after the last newline: the start of a line not yet whole
        if lines:
            # The first piece ends the line begun in earlier chunks: kept in `tail`, or, when that
            # line was overlong, already counted and dropped.
            lines[0] = b"" if overlong else tail + lines[0]
            overlong, tail = False, b""
            for line in lines:
                rec = _parse(line, stats)
                if rec is not None:
                    yield rec
        if overlong:
            continue
        tail += rest
        if len(tail) > MAX_LINE_BYTES:
            stats.skipped_lines += 1
            overlong, tail = True, b""
    if tail.strip():
        stats.skipped_lines += 1  # no newline: the write that made it never finished


def _parse(line: bytes, stats: ReadStats) -> Record | None:
    if not line.strip():
        return None
    try:
        rec = Record.from_json_dict(orjson.loads(line))
        for name in _WIDE:
            v = getattr(rec, name)
            if isinstance(v, str):
                setattr(rec, name, int(v))  # digits only, as encode() wrote them
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        stats.skipped_lines += 1
        return None
    stats.records += 1
    return rec
