"""aiohttp's client in the shape bench/noop_relay.py uses of llmmeter's own upstream client:
`request(method, url, headers, body)` gives a response with `.status`, `.raw_headers`
(lower-case bytes pairs), its body by `async for chunk in response` and `release()`.
Benchmark use only: it measures what the relay would cost on aiohttp instead.

Set up as a relay would: one ClientSession, at most 100 connections per host kept alive 30 s,
no cookie jar, bodies passed on as they come (no decompression), the URL forwarded as given
(no re-quoting), and no header of aiohttp's own but Host and Content-Length.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import aiohttp
from yarl import URL

# Headers aiohttp would add on its own; the relay forwards the client's instead (or none).
SKIP_AUTO_HEADERS = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")


class AiohttpResponse:
    """One response: its head at once, its body read with `async for chunk in response`."""

    __slots__ = ("_response", "raw_headers", "status")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.raw_headers = [(k.lower(), v) for k, v in response.raw_headers]

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._response.content.iter_any()

    def release(self) -> None:
        """Done with the response: its connection goes back to aiohttp's pool when the body
        was read whole, and is closed otherwise."""
        self._response.release()

    def close(self) -> None:
        """Drop the connection (a body not read to its end cannot be reused)."""
        self._response.close()


class AiohttpClient:
    """One aiohttp.ClientSession, made on the first request (it needs the running loop)."""

    def __init__(self, connect_timeout: float, read_timeout: float, *, limit_per_host: int = 100,
                 keepalive_timeout: float = 30) -> None:
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self.limit_per_host, self.keepalive_timeout = limit_per_host, keepalive_timeout
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=self.limit_per_host,
                                         keepalive_timeout=self.keepalive_timeout)
        timeout = aiohttp.ClientTimeout(total=None, connect=self.connect_timeout, sock_read=self.read_timeout)
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=timeout, auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=SKIP_AUTO_HEADERS)
        return self._session

    async def request(self, method: str, url: str, headers: Iterable[tuple[str, str]], body: bytes) -> AiohttpResponse:
        session = self._session or self._open()
        response = await session.request(method, URL(url, encoded=True), headers=list(headers),
                                         data=body or None, allow_redirects=False)
        return AiohttpResponse(response)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
