"""Incremental server-sent-events reader (WHATWG "event stream interpretation"), sans-io.

Fed bytes in chunks of any size, it returns the blocks (the lines up to and including a
blank line) completed so far. Every byte belongs to exactly one block, so joining the
`raw` of every block returned by `feed` and `close` gives back the stream byte for byte,
however it was chunked; a caller may drop or forward whole blocks without re-serialising.
"""

from __future__ import annotations

from dataclasses import dataclass

_BOM = b"\xef\xbb\xbf"
_CR = 13
_LF = 10


@dataclass(slots=True)
class Block:
    """One event block as it came on the wire, and its fields."""

    raw: bytes  # exact bytes, comment lines and the terminating blank line included
    event: str  # "" when the block has no event field
    data: str | None  # data lines joined with "\n"; None when there is no data field
    id: str | None
    complete: bool = True  # False: the stream ended before the blank line


class SSEReader:
    """Splits a byte stream into SSE blocks; holds back only an unfinished block."""

    __slots__ = ("_buf", "_first", "_lines", "_look", "_scan")

    def __init__(self) -> None:
        self._buf = bytearray()  # the unfinished block's bytes, from its first byte
        self._scan = 0  # offset in _buf of the first line not yet split off
        # Offset in _buf where the search for a line ending resumes: [_scan, _look) holds none,
        # so a long line arriving in many small chunks is searched once, not once per chunk.
        self._look = 0
        self._lines: list[bytes] = []  # complete lines of the unfinished block
        self._first = True  # only the stream's very first line may start with a BOM

    @property
    def pending(self) -> int:
        """Bytes held back because their block is not finished yet."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Block]:
        if not data:
            return []
        return self._split(data, eof=False)

    def close(self) -> list[Block]:
        """At end of stream: the rest, an unterminated trailing block marked incomplete."""
        return self._split(b"", eof=True)

    def _split(self, data: bytes, eof: bool) -> list[Block]:
        work: bytes | bytearray
        if self._buf:
            self._buf += data
            work, pos, look = self._buf, self._scan, self._look
        else:
            work, pos, look = data, 0, 0  # the common case: no copy of the chunk
        n = len(work)
        blocks: list[Block] = []
        lines = self._lines
        start = 0  # where the current block begins in work
        # Both positions are cached: most streams have no CR at all, and a CR-only stream
        # has no LF, so neither is searched for again before the loop passes it.
        cr = work.find(b"\r", look)
        lf = work.find(b"\n", look)
        look = n
        while pos < n:
            if cr != -1 and cr < pos:
                cr = work.find(b"\r", pos)
            if lf != -1 and lf < pos:
                lf = work.find(b"\n", pos)
            if cr != -1 and (lf == -1 or cr < lf):
                t = cr
                if t + 1 < n:
                    nxt = t + 2 if work[t + 1] == _LF else t + 1
                elif eof:
                    nxt = n
                else:
                    look = t  # a CR at the very end may be the first half of a CRLF
                    break
            elif lf != -1:
                t, nxt = lf, lf + 1
            else:
                break
            line = bytes(work[pos:t])  # a copy only when work is the bytearray buffer
            if self._first:
                self._first = False
                if line[:3] == _BOM:
                    line = line[3:]
            if line:
                lines.append(line)
            else:
                blocks.append(_block(bytes(work[start:nxt]), lines, True))
                lines = []
                start = nxt
            pos = nxt
        if eof:
            if start < n:
                if pos < n:
                    tail = bytes(work[pos:n])
                    if self._first and tail[:3] == _BOM:
                        tail = tail[3:]
                    if tail:
                        lines.append(tail)
                blocks.append(_block(bytes(work[start:n]), lines, False))
            self._buf, self._scan, self._look, self._lines, self._first = bytearray(), 0, 0, [], True
            return blocks
        if work is self._buf:
            del self._buf[:start]
        elif start < n:
            self._buf = bytearray(work[start:])
        self._scan = pos - start
        self._look = max(look, pos) - start
        self._lines = lines
        return blocks


def _block(raw: bytes, lines: list[bytes], complete: bool) -> Block:
    event = ""
    parts: list[str] | None = None
    ident: str | None = None
    for line in lines:
        if line[0] == 58:  # ":" starts a comment
            continue
        s = line.decode("utf-8", "replace")
        i = s.find(":")
        if i == -1:
            name, value = s, ""
        else:
            name, value = s[:i], s[i + 1 :]
            if value[:1] == " ":
                value = value[1:]
        if name == "data":
            if parts is None:
                parts = [value]
            else:
                parts.append(value)
        elif name == "event":
            event = value
        elif name == "id" and "\0" not in value:
            ident = value
    if parts is None:
        data = None
    elif len(parts) == 1:
        data = parts[0]
    else:
        data = "\n".join(parts)
    return Block(raw, event, data, ident, complete)
