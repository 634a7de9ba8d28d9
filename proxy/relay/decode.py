"""Decompressing a response for the meter, in bounded pieces.

A metered endpoint asks for `accept-encoding: identity`, but an upstream may compress all
the same. The meter then reads a decoded copy: never more than PIECE bytes come out of one
call (a 255 KB gzip bomb must not become 600 MB at once) and never more than `cap` bytes
in all per request (`server.max_decompressed_mb`); past the cap, or on a corrupt stream,
decoding stops and the record is estimated instead.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

PIECE = 64 * 1024
# br and zstd need a decoder outside the standard library, and none is among the locked
# dependencies: such an answer is relayed as it came and its record estimated, flagged so.
SUPPORTED = ("gzip", "x-gzip", "deflate")
DECODE_UNSUPPORTED = "decode_unsupported"


class Decoder:
    """`feed(data)` yields decoded pieces; `failed` says why decoding stopped, if it did."""

    def __init__(self, encoding: str, cap: int) -> None:
        # gzip, or deflate as RFC 9110 means it (zlib-wrapped); +32 detects either header.
        self._z = zlib.decompressobj(zlib.MAX_WBITS | 32)
        self.encoding, self.cap = encoding, cap
        self.total = 0
        self.failed: str | None = None  # "corrupt" | "over_cap"

    def feed(self, data: bytes) -> Iterator[bytes]:
        if self.failed is not None:
            return
        z = self._z
        while data:
            try:
                out = z.decompress(data, PIECE)
            except zlib.error:
                self.failed = "corrupt"
                return
            data = z.unconsumed_tail
            if z.eof:
                data = b""  # bytes after the end of the stream are not the body
            if out:
                self.total += len(out)
                if self.total > self.cap:
                    self.failed = "over_cap"
                    return
                yield out

    def close(self) -> None:
        """The body ended: a stream that did not reach its end is corrupt."""
        if self.failed is None and not self._z.eof:
            self.failed = "corrupt"


def decoder_for(encoding: str, cap: int) -> Decoder | None:
    """A decoder for a supported content coding; None for identity or one we cannot read."""
    return Decoder(encoding, cap) if encoding in SUPPORTED else None
