"""Whether a download is a batch's output, and whose batch it is (SPEC "Version 4 additions").

A file's content may be anything a tenant uploaded, results-shaped lines included: metered
on its shape alone, 40 forged lines could bill any model at any price and spend budgets.
So a download is metered as batch results only when its file id came back as a batch's
`output_file_id`/`error_file_id` through llmmeter (kept in the ledger's database, so every
worker, replica and restart knows it), or else when the upstream's own file object says
`purpose: batch_output` (one more upstream request).

Whose records they are: a batch belongs to the tenant whose request created it through
llmmeter, and its results are that tenant's, whoever downloads them. Seeing a batch (a GET
of it, or of a listing, which on a shared upstream account shows every tenant's batches)
makes no one its owner. A batch llmmeter did not see created has no owner here: its results
are the downloader's, who chose to download them. When the database cannot say which it is,
the download is relayed unread: metered to a guess, its first records would keep that
guess for good (record ids dedupe), so the cost waits for the next download instead.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from proxy.errors import UpstreamError
from proxy.ledger.store import SqlStore
from proxy.ledger.store.errors import StoreUnavailable
from proxy.protocol.batch import OPENAI, Download, created_batch, is_batch_output, output_files
from proxy.upstream.client import UpstreamClient

log = logging.getLogger("llmmeter.relay")
MAX_FILE_OBJECT = 1024 * 1024  # a file object is a few hundred bytes: more is not one


class BatchFiles:
    """The ledger's record of batch owners and output files, and the upstream's word when it has none."""

    def __init__(self, store: SqlStore | None) -> None:
        self.store = store

    async def note(self, upstream: str, tenant: str, body: bytes, creates: str | None = None) -> None:
        """Keeps what a batch answer tells: with `creates` (the dialect of a creation request),
        `tenant` as the created batch's owner; the output files a batch object (or page) names.
        A database that is away costs only the record (see the module's docstring)."""
        if self.store is None:
            return
        at_us = int(datetime.now(UTC).timestamp() * 1_000_000)
        created = created_batch(creates, body) if creates is not None else None
        by_batch: dict[str, list[str]] = {}
        for batch_id, file_id in output_files(body):
            by_batch.setdefault(batch_id, []).append(file_id)
        try:
            if created is not None:
                await asyncio.to_thread(self.store.note_batch_owner, upstream, created, tenant, at_us)
            for batch_id, file_ids in by_batch.items():
                await asyncio.to_thread(self.store.note_batch_files, upstream, batch_id, file_ids, at_us)
        except StoreUnavailable as e:
            log.warning("batch owner or output files of upstream %s not kept: %s", upstream, e)

    async def checked(self, download: Download, upstream: str, client: UpstreamClient, file_url: str,
                      headers: list[tuple[str, str]]) -> Download | None:
        """`download` with the tenant whose batch made it (None: the downloader's) when it is
        known to be batch output; None when it is to be relayed without being read as results."""
        store = self.store
        if download.kind != OPENAI:  # a message batch's results path names what it carries
            if store is None:
                return download
            try:
                owner = await asyncio.to_thread(store.batch_owner, upstream, download.source_id)
            except StoreUnavailable as e:
                log.warning("owner of batch %s on upstream %s not readable, results relayed unmetered: %s",
                            download.source_id, upstream, e)
                return None
            return Download(download.kind, download.source_id, owner)
        if store is not None:
            try:
                known = await asyncio.to_thread(store.batch_file, upstream, download.source_id)
            except StoreUnavailable as e:
                log.warning("batch output file %s of upstream %s not readable, relayed unmetered: %s",
                            download.source_id, upstream, e)
                return None
            if known is not None:
                return Download(download.kind, download.source_id, known.owner)
        if await _says_batch_output(client, file_url, headers):
            return download
        return None


async def _says_batch_output(client: UpstreamClient, url: str, headers: list[tuple[str, str]]) -> bool:
    """GET the file object; anything but a 200 naming purpose batch_output (a failure too) is a no."""
    try:
        resp = await client.request("GET", url, headers, b"")
    except (UpstreamError, TimeoutError) as e:
        log.warning("upstream %s: file object %s not read: %s", client.upstream.name, url, e)
        return False
    body = bytearray()
    try:
        if resp.status != 200:
            return False
        async for chunk in resp:
            body += chunk
            if len(body) > MAX_FILE_OBJECT:
                return False
    except (UpstreamError, TimeoutError) as e:
        log.warning("upstream %s: file object %s not read: %s", client.upstream.name, url, e)
        return False
    finally:
        if resp.at_end:
            resp.release()
        else:
            resp.close()
    return is_batch_output(bytes(body))
