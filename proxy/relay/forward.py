"""Forwarding one request: open (send it, get the head) → stream (relay the body as it
arrives, reading usage on the way) → finish (journal the record, then the last bytes).

The record is journaled before the client has the whole response (SPEC "Ledger"): before
the chunk that completes the body, or before the end of a chunked one. Nothing else is held
back: every other chunk goes to the client as soon as it arrives.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Generator, MutableMapping
from dataclasses import dataclass
from typing import Any, TypeVar

from proxy.errors import Broken, MalformedResponse, PoolTimeout, StreamBroken, Unreachable, error_body
from proxy.metering.meter import Exchange, Meter
from proxy.metrics.metrics import Metrics
from proxy.protocol.answer_body import read_answer
from proxy.protocol.batch import Download
from proxy.protocol.names import METERED
from proxy.protocol.tap import StreamTap
from proxy.protocol.usage import Observed
from proxy.relay.batch import MAX_HELD, BatchMeter, Counted, Pace, named_here
from proxy.relay.decode import DECODE_UNSUPPORTED, Decoder, decoder_for
from proxy.relay.provenance import BatchFiles
from proxy.upstream.client import Response, UpstreamClient
from proxy.upstream.routing import response_headers

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
MAX_METERED_BODY = 64 * 1024 * 1024  # non-streamed bodies kept (in memory) for reading usage
# Answers that never carry a body (RFC 9110 6.4.1); what their Content-Length announces is
# not sent, and the ASGI server would take the missing bytes for a short body.
BODILESS = frozenset({204, 304})

log = logging.getLogger("llmmeter.relay")
T = TypeVar("T")


@dataclass(slots=True)
class Outbound:
    """What goes to the upstream, and how the answer is to be treated."""

    client: UpstreamClient
    method: str
    url: str
    headers: list[tuple[str, str]]
    body: bytes
    drop_usage_only: bool  # llmmeter asked for the usage chunk: remove it on the way back
    anthropic: bool  # errors in Anthropic's shape
    download: Download | None = None  # batch results: each line metered on the way (SPEC "Batch jobs")
    public_url: str | None = None  # set: a results_url in the (batch object) answer is made to name llmmeter
    batch_files: BatchFiles | None = None  # set: the output files an OpenAI batch object names are kept
    creates: str | None = None  # a batch-creating request (OPENAI, ANTHROPIC): the tenant is kept as its owner


class Forwarder:
    def __init__(self, meter: Meter, metrics: Metrics, max_decompressed: int,
                 pending: Callable[[], int] | None = None) -> None:
        self.meter, self.metrics = meter, metrics
        self.max_decompressed = max_decompressed
        self.counted = Counted()  # batch results already in /metrics
        self.pace = Pace(pending)  # `pending`: the ledger's records not yet in the database

    async def run(self, ex: Exchange, out: Outbound, send: Send) -> None:
        """Forward, relay and record. Raises StreamBroken when the upstream failed after the
        client's response began (the server then aborts the client's connection)."""
        if ex.endpoint not in METERED:
            await self._run(ex, out, send)
            return
        gauge = self.metrics.requests_in_flight  # llmmeter_requests_in_flight: served live, under way
        gauge.inc()
        try:
            await self._run(ex, out, send)
        finally:
            gauge.dec()

    async def _run(self, ex: Exchange, out: Outbound, send: Send) -> None:
        try:
            resp = await self._open(ex, out, send)
        except asyncio.CancelledError:  # the client left before the upstream answered
            ex.outcome = "client_closed"
            await self.finish(ex, Observed(), str)
            raise
        if resp is None:
            return
        stream = _Stream(self, ex, out, resp, send)
        try:
            await stream.relay()
        except asyncio.CancelledError:
            ex.outcome = "client_closed"
            raise
        except (Broken, TimeoutError) as e:
            kind, outcome = _failure(e)
            self._upstream_error(out, kind)
            ex.outcome = outcome
            log.warning("upstream %s %s mid-response: %s", out.client.upstream.name, kind, e)
            if stream.held:  # nothing went out yet (a batch object being held): the client gets an error
                ex.code = 504 if kind == "timeout" else 502
                await stream.record_partial()
                await send_whole(send, ex.code, error_body(f"the upstream failed mid-response ({kind})",
                                                           "api_error" if out.anthropic else "upstream_error",
                                                           outcome, out.anthropic))
                return
            await stream.record_partial()
            raise StreamBroken(f"upstream {kind} mid-response") from e
        finally:
            if not stream.recorded:
                await stream.record_partial()
            if resp.at_end:
                resp.release()  # read whole, whatever its status: the connection is kept
            else:
                resp.close()  # a half-read or abandoned body: drop the connection

    async def _open(self, ex: Exchange, out: Outbound, send: Send) -> Response | None:
        """The upstream's response head, or None when the client got an error instead."""
        if self.meter.spans is not None:
            out.headers = self.meter.spans.begin(ex, out.headers)  # the upstream's parent: llmmeter's span
        ex.overhead_s += time.perf_counter() - ex.t0
        name = out.client.upstream.name
        try:
            return await out.client.request(out.method, out.url, out.headers, out.body, ex.tenant)
        # The client is told what failed; where (addresses, egress proxy, ca_file) only the log says.
        except PoolTimeout as e:
            status, outcome, kind, message = 503, "upstream_timeout", "timeout", \
                "every connection to the upstream stayed busy (max_connections)"
            detail = str(e)
        except TimeoutError as e:
            status, outcome, kind, message = 504, "upstream_timeout", "timeout", "the upstream did not answer in time"
            detail = str(e) or message
        except Unreachable as e:
            status, outcome, kind, message = 502, "upstream_unreachable", "unreachable", \
                f"the upstream could not be reached: {e.what}"
            detail = str(e)
        except MalformedResponse as e:
            status, outcome, kind, message = 502, "upstream_malformed", "malformed", \
                "the upstream's response was not valid HTTP"
            detail = str(e)
        except Broken as e:  # the request was written: it is never sent a second time
            status, outcome, kind, message = 502, "upstream_reset", "reset", \
                "the upstream connection failed after the request was sent"
            detail = str(e)
        self._upstream_error(out, kind)
        log.warning("upstream %s %s: %s", name, kind, detail)
        api_kind = "api_error" if out.anthropic else "upstream_error"
        await send_whole(send, status, error_body(message, api_kind, outcome, out.anthropic))
        ex.code, ex.outcome = status, outcome
        self.meter.record(ex, Observed(), None, "upstream")
        return None

    def _upstream_error(self, out: Outbound, kind: str) -> None:
        self.metrics.upstream_errors.labels(out.client.upstream.name, kind).inc()

    async def finish(self, ex: Exchange, observed: Observed, text: Callable[[], str]) -> None:
        if not self.meter.needs_estimate(ex, observed):
            self.meter.record(ex, observed, observed.usage, "upstream")  # no await: no task to make
            if observed.usage is not None and ex.stream is False:
                # Before the last byte, so a client's next stream is estimated with what this taught.
                await self.meter.learn(ex, observed)
            return
        # Shielded: a client leaving mid-estimate must not cost the record.
        await asyncio.shield(self.meter.finish(ex, observed, text))


class _Stream:
    """One response on its way to the client."""

    def __init__(self, fwd: Forwarder, ex: Exchange, out: Outbound, resp: Response, send: Send) -> None:
        self.fwd, self.ex, self.resp, self.send = fwd, ex, resp, send
        self.recorded = False
        ex.code = resp.status
        head = _head(resp.raw_headers)  # one pass over the headers for the four read here
        ex.upstream_request_id = head.get(b"x-request-id") or head.get(b"request-id")
        if resp.status >= 400:
            ex.outcome = "upstream_http_error"
            if resp.status >= 500 or resp.status == 429:
                fwd._upstream_error(out, "http_error")
        self.metered = ex.endpoint in METERED
        encoding = (head.get(b"content-encoding") or "").strip().lower()
        content_type = (head.get(b"content-type") or "").split(";", 1)[0].strip().lower()  # as resp.content_type
        self.decoder: Decoder | None = None
        self.undecodable = False  # a metered answer in a coding no decoder here reads (br, zstd)
        if self.metered and encoding not in ("", "identity"):
            self.decoder = decoder_for(encoding, fwd.max_decompressed)
            if self.decoder is None:  # relayed untouched, its record estimated and flagged
                self.metered, self.undecodable = False, True
        sse = content_type == "text/event-stream"
        self.tap = StreamTap(ex.endpoint, out.drop_usage_only) if self.metered and sse else None
        # An edited stream must be relayed decoded: the usage chunk cannot be cut out of gzip.
        self.edit = out.drop_usage_only and self.tap is not None
        self.decoded_out = self.edit and self.decoder is not None
        self.buffered = bytearray()
        ok = 200 <= resp.status < 300
        self.batch = BatchMeter(fwd.meter, ex, out.download, fwd.max_decompressed, fwd.counted, encoding) \
            if out.download is not None and ok else None
        self.public_url = out.public_url if ok and content_type == "application/json" else None
        # A batch object is kept whole (it is small) beside the relay, its output files noted at its end.
        self.files = out.batch_files if ok and content_type == "application/json" \
            and encoding in ("", "identity") else None
        self.creates = out.creates
        self.batch_object = bytearray()
        self.held = False  # the answer is being held whole, nothing of it sent yet

    async def relay(self) -> None:
        ex, resp, send = self.ex, self.resp, self.send
        held: bytes | None = None
        if self.public_url is not None:
            held = await self._hold(self.public_url)
            if held is None:  # rewritten and sent
                return
        t_mark = time.perf_counter()
        headers = response_headers(resp.raw_headers, body_edited=self.edit, decoded=self.decoded_out)
        if resp.status in BODILESS:  # RFC 9110 8.6: a 304 may leave it out, a 204 must
            headers = [(k, v) for k, v in headers if k != b"content-length"]
        await send({"type": "http.response.start", "status": resp.status, "headers": headers})
        ex.overhead_s += time.perf_counter() - t_mark
        last = b""
        if held is not None:  # held for a rewrite that did not happen: it goes on as it came
            if resp.at_end:
                await self._record(ended=True)
                await send({"type": "http.response.body", "body": held, "more_body": False})
                return
            await send({"type": "http.response.body", "body": held, "more_body": True})
        async for chunk in resp:
            t_mark = time.perf_counter()
            out = self._take(chunk)
            if self.files is not None:
                self._keep(chunk)
            if self.tap is not None and ex.ttft_s is None and self.tap.content_started:
                ex.ttft_s = t_mark - ex.t0
            if resp.at_end:
                last = out  # the body's last bytes: the record goes first
                break
            if self.tap is not None and self.tap.done and not self.recorded:
                await self._record(ended=False)
            ex.overhead_s += time.perf_counter() - t_mark
            if out:
                await send({"type": "http.response.body", "body": out, "more_body": True})
            if self.batch is not None:
                await self.fwd.pace()
        t_mark = time.perf_counter()
        if self.tap is not None:
            last += self.tap.finish()
        if not self.recorded:
            await self._record(ended=True)
        if self.files is not None and resp.at_end:  # noted before the client can ask for the file
            await self.files.note(ex.upstream, ex.tenant, bytes(self.batch_object), self.creates)
        ex.overhead_s += time.perf_counter() - t_mark
        await send({"type": "http.response.body", "body": last, "more_body": False})

    def _keep(self, chunk: bytes) -> None:
        if len(self.batch_object) + len(chunk) > MAX_HELD:  # no batch object: nothing to note
            self.files = None
            self.batch_object = bytearray()
            return
        self.batch_object += chunk

    async def _hold(self, public_url: str) -> bytes | None:
        """A message-batch object, held whole (it is small) so that its results_url can name
        llmmeter, then sent with its new length. Returns what was held when it was not
        rewritten (too large, not JSON, nothing to change), for the caller to relay as it came;
        None when it was."""
        resp = self.resp
        held = bytearray()
        self.held = True
        async for chunk in resp:
            held += chunk
            if len(held) > MAX_HELD:
                break
        self.held = False
        if len(held) > MAX_HELD:
            self.files = None  # no batch object: nothing to note
            return bytes(held)
        if self.files is not None:  # a created batch's owner, noted before the client knows its id
            await self.files.note(self.ex.upstream, self.ex.tenant, bytes(held), self.creates)
            self.files = None
        coding = (resp.header(b"content-encoding") or "").strip().lower()
        body = named_here(bytes(held), coding, public_url)
        if body is None:
            return bytes(held)
        headers = response_headers(resp.raw_headers, body_edited=True, decoded=coding not in ("", "identity"))
        await self.send({"type": "http.response.start", "status": resp.status,
                         "headers": [*headers, (b"content-length", str(len(body)).encode())]})
        await self._record(ended=True)
        await self.send({"type": "http.response.body", "body": body, "more_body": False})
        return None

    def _take(self, chunk: bytes) -> bytes:
        """Feeds the meter; returns what goes to the client."""
        if not self.metered:
            if self.batch is not None:
                self.batch.feed(chunk)
            return chunk
        decoder, tap = self.decoder, self.tap
        if tap is not None:
            if decoder is None:
                return tap.feed(chunk)
            if self.decoded_out:
                out = b"".join(tap.feed(piece) for piece in decoder.feed(chunk))
                if decoder.failed:  # the rest could not be relayed decoded
                    raise Broken(f"the upstream's {decoder.encoding} stream could not be decoded ({decoder.failed})")
                return out
            for piece in decoder.feed(chunk):
                tap.feed(piece)
            return chunk  # a compressed stream is relayed as it came
        if decoder is not None:
            for piece in decoder.feed(chunk):
                self.buffered += piece
        elif len(self.buffered) < MAX_METERED_BODY:
            self.buffered += chunk
        return chunk

    async def _record(self, ended: bool) -> None:
        """`ended`: the body is whole, so a compressed one must have reached its end too (a
        stream's usage may be recorded earlier, while its rest is still on the way)."""
        self.recorded = True
        ex, tap = self.ex, self.tap
        if tap is not None:
            if self.decoder is not None and not self.decoded_out:
                if ended:
                    self.decoder.close()
                if self.decoder.failed:
                    await self.fwd.finish(ex, self._undecoded(), tap.completion_text)
                    return
            await self.fwd.finish(ex, tap.observed(), tap.completion_text)
            return
        if self.undecodable:
            await self.fwd.finish(ex, Observed(faults=(DECODE_UNSUPPORTED,)), str)
            return
        if not self.metered:
            if self.batch is not None and ended:
                self.batch.finish()
            self.fwd.meter.record(ex, self._download_observed(), None, "upstream")
            return
        if self.decoder is not None:
            self.decoder.close()
            if self.decoder.failed:  # corrupt or past the cap: estimated, never lost
                await self.fwd.finish(ex, self._undecoded(), str)
                return
        # Paced: a large answer is skimmed a slice at a time while other clients are served.
        observed, text = await paced(read_answer(ex.endpoint, bytes(self.buffered)))
        await self.fwd.finish(ex, observed, text)

    def _undecoded(self) -> Observed:
        assert self.decoder is not None and self.decoder.failed is not None
        return Observed(faults=("decode_" + self.decoder.failed,))  # decode_corrupt, decode_over_cap

    async def record_partial(self) -> None:
        """The response ended early (client gone, upstream failed): record what was seen."""
        if self.recorded:
            return
        self.recorded = True
        tap = self.tap
        if self.undecodable:
            observed = Observed(faults=(DECODE_UNSUPPORTED,))
        else:
            observed = tap.observed() if tap is not None else self._download_observed()
        await self.fwd.finish(self.ex, observed, tap.completion_text if tap is not None else str)

    def _download_observed(self) -> Observed:
        """A batch download's own record: flagged with what its lines could not give."""
        batch = self.batch
        if batch is None:
            return Observed()
        batch.close()
        batch.count_faults()
        return Observed(faults=batch.faults())


_READ_HERE = frozenset({b"x-request-id", b"request-id", b"content-encoding", b"content-type"})


def _head(raw: list[tuple[bytes, bytes]]) -> dict[bytes, str]:
    """The first value of each header _Stream reads (as Response.header gives it)."""
    found: dict[bytes, str] = {}
    for k, v in raw:
        if k in _READ_HERE and k not in found:
            found[k] = v.decode("latin-1")
    return found


def _failure(e: BaseException) -> tuple[str, str]:
    if isinstance(e, TimeoutError):
        return "timeout", "upstream_timeout"
    if isinstance(e, MalformedResponse):
        return "malformed", "upstream_malformed"
    return "reset", "upstream_reset"


async def paced(steps: Generator[None, None, T]) -> T:
    """Drive a sans-io generator on the loop, letting every other task run between its slices."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        await asyncio.sleep(0)


async def send_whole(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *(headers or [])]})
    await send({"type": "http.response.body", "body": body, "more_body": False})
