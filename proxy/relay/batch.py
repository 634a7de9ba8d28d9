"""Batch jobs on the relay (SPEC "Batch jobs"): results metered line by line while a
download streams through, and Anthropic's batch objects made to name llmmeter.

A download is relayed byte for byte; beside it, each result line that reports usage becomes
one record (endpoint and tier `batch`), journaled before the bytes that carry it go on. Its
id is derived from (upstream, file or batch id, custom_id), so a second download of the same
results is a no-op in the ledger; this process also remembers how many results of a download
it has counted, so /metrics does not count them twice either.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import orjson

from proxy.metering.meter import Exchange, Meter
from proxy.protocol.batch import ANTHROPIC, INVALID, Download, Lines, Result, is_result_file, json_object, read_line
from proxy.protocol.names import BATCH
from proxy.relay.decode import Decoder, decoder_for

START_FROM_DOWNLOAD = "start_from_download"  # the result named no creation time: the download's is used
# Fault kinds (proxy/protocol/names.py) a download's own record is flagged with, counted per line.
LINE_OVER_CAP = "decode_over_cap"  # a line longer than server.max_decompressed_mb: skipped
LINE_UNREADABLE = "reader_error"  # a line that is not a result (not JSON, no custom_id, odd shape)
BODY_CORRUPT = "decode_corrupt"  # a compressed download that would not decompress: the rest unread
_EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
_SKEW = timedelta(days=1)  # a creation time this far past the download is not one
MAX_HELD = 16 * 1024 * 1024  # a batch object (or a page of them) held to rewrite its results_url
PACE_ABOVE = 5_000  # records waiting for the database: past this, a batch download waits for them
_STALLED_S = 1.0  # ...unless the database has taken none for this long: then it goes on (the journal holds them)


def record_id(upstream: str, source_id: str, custom_id: str) -> str:
    """`batch-` + 32 hex digits of sha256 over the three, JSON-encoded so no two triples collide."""
    digest = hashlib.sha256(orjson.dumps([upstream, source_id, custom_id])).hexdigest()
    return "batch-" + digest[:32]


class Counted:
    """How many results of each download (upstream, id) this process has already counted in
    /metrics, in file order; bounded (oldest forgotten first)."""

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self._counts: OrderedDict[tuple[str, str], int] = OrderedDict()

    def get(self, key: tuple[str, str]) -> int:
        return self._counts.get(key, 0)

    def note(self, key: tuple[str, str], results: int) -> None:
        if results <= self._counts.get(key, 0):
            return
        self._counts[key] = results
        self._counts.move_to_end(key)
        while len(self._counts) > self.limit:
            self._counts.popitem(last=False)


class Pace:
    """Keeps a batch download at the ledger's pace: a file's results arrive faster than a
    database takes them, and records waiting in memory are what a long file would cost.
    A database that takes nothing holds no download hostage: after _STALLED_S it goes on."""

    def __init__(self, pending: Callable[[], int] | None, above: int = PACE_ABOVE) -> None:
        self.pending, self.above = pending, above

    async def __call__(self) -> None:
        pending = self.pending
        if pending is None or (last := pending()) <= self.above:
            return
        moved = time.monotonic()
        while True:
            await asyncio.sleep(0.005)
            now_pending = pending()
            if now_pending <= self.above:
                return
            now = time.monotonic()
            if now_pending < last:
                last, moved = now_pending, now
            elif now - moved > _STALLED_S:
                return


class BatchMeter:
    """One download of batch results: bytes in, one record per result that reported usage."""

    __slots__ = ("_checked", "_counted", "_decoder", "_ex", "_key", "_lines", "_meter", "download", "invalid",
                 "off", "recorded", "results", "unreadable_coding")

    def __init__(self, meter: Meter, ex: Exchange, download: Download, line_cap: int, counted: Counted,
                 encoding: str = "") -> None:
        self._meter, self._ex, self.download, self._counted = meter, ex, download, counted
        self._key = (ex.upstream, download.source_id)
        self._lines = Lines(line_cap)
        self._checked = download.kind == ANTHROPIC  # an OpenAI file's first line says if it holds results
        self.off = False  # not a file of results (or not decodable): relayed, not read
        self.results = 0  # result lines that reported usage, in file order
        self.recorded = 0  # ... of which were recorded (all, unless the metering itself failed)
        self.invalid = 0
        self.unreadable_coding = False
        self._decoder: Decoder | None = None
        coding = encoding.strip().lower()
        if coding not in ("", "identity"):
            # Identity was asked for; an upstream that compresses anyway is decoded, the cap
            # applying per line (SPEC), not to the whole file.
            self._decoder = decoder_for(coding, sys.maxsize)
            if self._decoder is None:
                self.off = self.unreadable_coding = True

    def feed(self, chunk: bytes) -> None:
        if self.off:
            return
        decoder = self._decoder
        if decoder is None:
            self._take(chunk)
            return
        for piece in decoder.feed(chunk):
            self._take(piece)
        if decoder.failed:
            self.off = True

    def finish(self) -> None:
        """The body ended cleanly: its last line need not end in a newline."""
        if self.off:
            return
        if self._decoder is not None:
            self._decoder.close()
            if self._decoder.failed:
                self.off = True
                return
        line = self._lines.finish()
        if line is not None:
            self._line(line)
        self._counted.note(self._key, self.results)

    def close(self) -> None:
        """The download stopped early (client gone, upstream failed): an unfinished line is
        not read, what was counted stays counted."""
        self._counted.note(self._key, self.results)

    @property
    def held(self) -> int:
        """Bytes of an unfinished line held now (never more than the line cap)."""
        return self._lines.held

    def faults(self) -> tuple[str, ...]:
        """The download record's flags: each kind once (the metrics count the rest, see `count_faults`)."""
        out = []
        if self._lines.over_cap:
            out.append(LINE_OVER_CAP)
        if self.invalid or self.unreadable_coding:
            out.append(LINE_UNREADABLE)
        if self._decoder is not None and self._decoder.failed == "corrupt":
            out.append(BODY_CORRUPT)
        return tuple(out)

    def count_faults(self) -> None:
        """Per line: the download record counts each kind once, the lines beyond it are added here."""
        extra = {LINE_OVER_CAP: self._lines.over_cap - 1, LINE_UNREADABLE: self.invalid - 1}
        for kind, n in extra.items():
            if n > 0:
                self._meter.metrics.faults.adder((kind,))(n)

    def _take(self, data: bytes) -> None:
        if not self._checked and not self._lines.held:
            first = data.lstrip()[:1]
            if first and first != b"{":  # not JSON lines (a PDF, an image): not even its first line is held
                self.off = True
                return
        for line in self._lines.feed(data):
            if self.off:
                return
            self._line(line)

    def _line(self, line: bytes) -> None:
        if not self._checked:
            if not line.strip():
                return
            self._checked = True
            if not is_result_file(line):
                self.off = True
                return
        result = read_line(self.download.kind, line)
        if isinstance(result, Result):
            self._record(result)
        elif result == INVALID:
            self.invalid += 1

    def _record(self, result: Result) -> None:
        ex = self._ex
        index = self.results
        self.results += 1
        start, flags = self._start(result.created)
        # A batch created through llmmeter bills the tenant that created it, whoever downloads it.
        owner = self.download.owner or ex.tenant
        line = Exchange(start=start, t0=ex.t0, endpoint=BATCH, tenant=owner,
                        id=record_id(ex.upstream, self.download.source_id, result.custom_id),
                        upstream=ex.upstream, self_hosted=ex.self_hosted,
                        tag=ex.tag if owner == ex.tenant else None, code=result.code,
                        outcome="ok" if result.code < 400 else "upstream_http_error",
                        upstream_request_id=result.custom_id)
        self._meter.record_batch(line, result.observed, flags, observe=index >= self._counted.get(self._key))
        self.recorded += 1

    def _start(self, created: float | None) -> tuple[datetime, tuple[str, ...]]:
        downloaded = self._ex.start
        if created is not None:
            try:
                at = datetime.fromtimestamp(created, UTC)
            except (OverflowError, OSError, ValueError):
                at = None
            if at is not None and _EARLIEST <= at <= downloaded + _SKEW:
                return at, ()
        return downloaded, (START_FROM_DOWNLOAD,)


def named_here(body: bytes, coding: str, public_url: str) -> bytes | None:
    """A message-batch object (or a page of them) whose results_url names `public_url` + the
    same /v1 path, uncompressed; None when there is nothing to change (or no JSON to change
    it in). Identity was asked for: a body compressed all the same is decoded when it can be."""
    if coding not in ("", "identity"):
        decoder = decoder_for(coding, MAX_HELD)
        if decoder is None:
            return None
        body = b"".join(decoder.feed(body))
        decoder.close()
        if decoder.failed:
            return None
    obj = json_object(body)
    if obj is None:
        return None
    items = [obj]
    data = obj.get("data")
    if isinstance(data, list):
        items += [d for d in data if isinstance(d, dict)]
    changed = False
    for item in items:
        url = item.get("results_url")
        if isinstance(url, str) and (new := _here(url, public_url)) is not None and new != url:
            item["results_url"] = new
            changed = True
    if not changed:
        return None
    try:
        return orjson.dumps(obj)
    except orjson.JSONEncodeError:
        return None


def _here(url: str, public_url: str) -> str | None:
    """`https://api.anthropic.com/v1/messages/batches/X/results?q` -> public_url + `/v1/messages/batches/X/results?q`:
    every path llmmeter relays starts with /v1, whatever the upstream's base path."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    at = parts.path.find("/messages/batches/")
    if at < 0:
        return None
    return public_url + "/v1" + parts.path[at:] + ("?" + parts.query if parts.query else "")
