"""uvicorn's httptools protocol with a bound on the size of a request head.

httptools takes a request line and headers of any size, and uvicorn keeps every header
as a Python object: a client sending megabytes of headers costs the proxy that memory
many times over (200,000 small headers took ~1 GB) and, below that, the headers would be
forwarded upstream. Past MAX_HEAD_BYTES the client gets 431 and the connection closes.
"""

from __future__ import annotations

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEAD_BYTES = 64 * 1024  # request target + headers; SDKs send ~1 KiB, browsers' cookies stay under 16 KiB


class _HeadTooLarge(Exception):
    pass


class HeadLimitedProtocol(HttpToolsProtocol):
    _in_head = False
    _head_bytes = 0  # request target and header fields parsed so far, exactly
    _unparsed = 0  # whole chunks received while the head stayed incomplete (a huge field in the making)
    _too_large = False

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head_bytes, self._unparsed = True, 0, 0

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def data_received(self, data: bytes) -> None:
        whole = self._in_head  # the head was open before this chunk: if it still is, all of it is head
        super().data_received(data)
        if whole and self._in_head and not self.transport.is_closing():
            self._unparsed += len(data)
            if self._unparsed > MAX_HEAD_BYTES:
                self._refuse()

    def send_400_response(self, msg: str) -> None:
        # The parser reports an exception raised in a callback as an invalid request.
        if self._too_large:
            self._refuse()
        else:
            super().send_400_response(msg)

    def _count(self, n: int) -> None:
        self._head_bytes += n
        if self._head_bytes > MAX_HEAD_BYTES:
            self._too_large = True
            raise _HeadTooLarge

    def _refuse(self) -> None:
        self._in_head = False
        body = orjson.dumps({"error": {"message": f"request line and headers exceed {MAX_HEAD_BYTES} bytes",
                                       "type": "invalid_request_error", "code": "request_header_too_large"}})
        self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
                             b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)
        self.transport.close()
