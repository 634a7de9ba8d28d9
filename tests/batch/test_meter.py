"""A batch download metered line by line (proxy/relay/batch.py): one record per result that
reported usage, at the batch tier, with an id that makes a second download a no-op."""

from __future__ import annotations

import gzip
import hashlib
import time
import tracemalloc
from datetime import UTC, datetime
from decimal import Decimal

import orjson
from prometheus_client import CollectorRegistry

from pricing import Price, PriceBook
from proxy.ledger.record import Record
from proxy.metering.estimate.estimator import Estimator
from proxy.metering.meter import Exchange, Meter
from proxy.metrics.metrics import Metrics
from proxy.protocol.batch import ANTHROPIC, OPENAI, Download
from proxy.relay.batch import START_FROM_DOWNLOAD, BatchMeter, Counted, record_id
from proxy.settings import Settings, Workloads
from tests.batch import lines as wire

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DOWNLOADED = datetime(2026, 6, 2, 12, 0, tzinfo=UTC)


def price(model: str, tier: str, inp: str, out: str, read: str = "0", write: str = "0") -> Price:
    return Price(model=model, tier=tier, effective_from=T0, input=Decimal(inp), output=Decimal(out),
                 cache_read=Decimal(read), cache_write=Decimal(write), source="test", match=(model,))


BOOK = PriceBook([price("gpt-test", "standard", "2", "8", "0.5"), price("gpt-test", "batch", "1", "4", "0.25"),
                  price("claude-test", "batch", "1.5", "7.5", "0.15", "1.875")])


class Kept:
    def __init__(self) -> None:
        self.records: list[Record] = []

    def append(self, record: Record) -> None:
        self.records.append(record)


class Dropped:
    """A journal that keeps nothing: what a long download costs in memory is the relay's own."""

    def __init__(self) -> None:
        self.count = 0

    def append(self, record: Record) -> None:
        self.count += 1


def make(journal: Kept | Dropped | None = None) -> tuple[Meter, Kept | Dropped, CollectorRegistry]:
    journal = journal if journal is not None else Kept()
    registry = CollectorRegistry()
    settings = Settings()
    meter = Meter(BOOK, Estimator(), Workloads(), journal, Metrics(settings, BOOK, registry))
    return meter, journal, registry


def download_exchange() -> Exchange:
    ex = Exchange(start=DOWNLOADED, t0=time.perf_counter(), endpoint="other", tenant="team-a", code=200)
    ex.upstream, ex.tag = "openai", "nightly"
    return ex


def run(meter: Meter, kind: str, source: str, data: bytes, counted: Counted | None = None, chunk: int = 7,
        encoding: str = "", cap: int = 1 << 20) -> BatchMeter:
    bm = BatchMeter(meter, download_exchange(), Download(kind, source), cap, counted or Counted(), encoding)
    for at in range(0, len(data), chunk):
        bm.feed(data[at:at + chunk])
    bm.finish()
    return bm


def units(usd: Decimal) -> int:
    return int(usd * 10**10)


def test_each_openai_result_is_a_batch_record_priced_at_the_batch_tier() -> None:
    meter, kept, _ = make()
    data = wire.jsonl([wire.openai_chat("request-1", prompt=1000, completion=200, cached=400),
                       wire.openai_failed("request-2"),
                       wire.openai_chat("request-3", prompt=10, completion=1, service_tier="flex")],
                      final_newline=False)
    bm = run(meter, OPENAI, "file-abc", data)
    assert isinstance(kept, Kept) and bm.faults() == ()
    a, b = kept.records
    assert (a.endpoint, a.tier, a.model, a.tenant, a.upstream, a.tag) == ("batch", "batch", "gpt-test", "team-a",
                                                                          "openai", "nightly")
    assert a.upstream_request_id == "request-1" and a.stream is False and a.usage_source == "upstream"
    assert (a.input_tokens, a.cache_read_tokens, a.output_tokens) == (600, 400, 200)
    assert a.start == datetime.fromtimestamp(wire.CREATED, UTC) and a.flags == []
    # Batch prices, USD per million: input 1, cache read 0.25, output 4.
    assert a.cost_units == units(Decimal(600 * 1 + 400 * Decimal("0.25") + 200 * 4) / 10**6)
    assert (a.price_tier, a.price_model) == ("batch", "gpt-test")
    # The line's own service_tier ("flex") does not change the tier: a batch result is billed as batch.
    assert b.tier == "batch" and b.price_tier == "batch" and b.upstream_request_id == "request-3"
    digest = hashlib.sha256(orjson.dumps(["openai", "file-abc", "request-1"])).hexdigest()[:32]
    assert a.id == "batch-" + digest == record_id("openai", "file-abc", "request-1")
    assert b.id != a.id


def test_a_result_without_a_creation_time_starts_at_the_download_flagged() -> None:
    meter, kept, _ = make()
    run(meter, ANTHROPIC, "msgbatch_01", wire.jsonl([
        wire.anthropic_succeeded("q1", inp=100, out=50, cache_read=1000, cache_write=200),
        wire.anthropic_errored("q2"), wire.anthropic_expired("q3")]))
    assert isinstance(kept, Kept)
    [r] = kept.records
    assert r.start == DOWNLOADED and START_FROM_DOWNLOAD in r.flags
    assert (r.model, r.tier, r.input_tokens, r.cache_read_tokens, r.cache_write_tokens, r.output_tokens) == \
        ("claude-test", "batch", 100, 1000, 200, 50)
    assert r.cost_units == units((100 * Decimal("1.5") + 1000 * Decimal("0.15") + 200 * Decimal("1.875")
                                  + 50 * Decimal("7.5")) / 10**6)


def test_a_creation_time_that_cannot_be_one_is_not_used() -> None:
    meter, kept, _ = make()
    future = int(DOWNLOADED.timestamp()) + 3 * 86400
    run(meter, OPENAI, "f", wire.jsonl([wire.openai_chat("a", 1, 1, created=future),
                                        wire.openai_chat("b", 1, 1, created=12),
                                        wire.openai_chat("c", 1, 1, created=None)]))
    assert isinstance(kept, Kept)
    assert [(r.start, r.flags) for r in kept.records] == [(DOWNLOADED, [START_FROM_DOWNLOAD])] * 3


def test_a_model_without_a_batch_price_falls_back_to_standard_flagged() -> None:
    meter, kept, _ = make()
    book = PriceBook([price("gpt-test", "standard", "2", "8")])
    meter.book = book
    run(meter, OPENAI, "f", wire.jsonl([wire.openai_chat("a", 1000, 0)]))
    assert isinstance(kept, Kept)
    [r] = kept.records
    assert (r.tier, r.price_tier, r.cost_units) == ("batch", "standard", units(Decimal(2000) / 10**6))
    assert "tier_fallback" in r.flags


def test_a_second_download_is_counted_once_in_the_metrics() -> None:
    meter, kept, registry = make()
    counted = Counted()
    data = wire.jsonl([wire.openai_chat(f"r{i}", 100, 10) for i in range(5)])
    run(meter, OPENAI, "file-1", data, counted)
    run(meter, OPENAI, "file-1", data, counted)
    assert isinstance(kept, Kept)
    assert len(kept.records) == 10 and len({r.id for r in kept.records}) == 5  # the ledger skips the repeats
    labels = {"model": "gpt-test", "tier": "batch", "tenant": "other", "type": "input"}  # team-a: not configured
    assert registry.get_sample_value("llmmeter_tokens_total", labels) == 500
    # Another file, and a partial first download of a third, then its whole: each result once.
    run(meter, OPENAI, "file-2", data, counted)
    bm = BatchMeter(meter, download_exchange(), Download(OPENAI, "file-3"), 1 << 20, counted)
    bm.feed(data[:len(data) // 2])
    bm.close()
    run(meter, OPENAI, "file-3", data, counted)
    assert registry.get_sample_value("llmmeter_tokens_total", labels) == 1500


def test_bad_lines_are_skipped_counted_and_the_rest_metered() -> None:
    meter, kept, registry = make()
    data = wire.jsonl([wire.openai_chat("a", 1, 1), b"{not json", b"x" * 5000, b'{"custom_id": 1}',
                       wire.openai_chat("b", 1, 1), b"y" * 6000, wire.openai_chat("c", 1, 1)])
    bm = run(meter, OPENAI, "f", data, cap=4096)
    assert isinstance(kept, Kept) and [r.upstream_request_id for r in kept.records] == ["a", "b", "c"]
    assert bm.invalid == 2 and bm.faults() == ("decode_over_cap", "reader_error")
    bm.count_faults()  # the lines past the first of each kind; the download's record counts the first
    assert registry.get_sample_value("llmmeter_metering_faults_total", {"kind": "decode_over_cap"}) == 1
    assert registry.get_sample_value("llmmeter_metering_faults_total", {"kind": "reader_error"}) == 1


def test_a_file_that_holds_no_results_is_not_read() -> None:
    meter, kept, _ = make()
    batch_input = b'{"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "gpt-test"}}'
    bm = run(meter, OPENAI, "file-in", wire.jsonl([batch_input, wire.openai_chat("r1", 1, 1)]))
    assert bm.off and isinstance(kept, Kept) and kept.records == [] and bm.faults() == ()
    bm = run(meter, OPENAI, "file-pdf", b"%PDF-1.7\n" + bytes(range(256)) * 100)
    assert bm.off and kept.records == []
    # A binary file with no newline for a long way is given up at its first byte, not held.
    bm = BatchMeter(meter, download_exchange(), Download(OPENAI, "file-bin"), 1 << 20, Counted())
    bm.feed(b"\x89PNG" + b"\x00" * 100_000)
    assert bm.off and bm.held == 0


def test_a_compressed_download_is_read_the_cap_applying_per_line() -> None:
    meter, kept, _ = make()
    lines = [wire.openai_chat(f"r{i}", 10, 1) for i in range(200)]
    data = gzip.compress(wire.jsonl(lines))
    bm = run(meter, OPENAI, "f", data, chunk=300, encoding="gzip", cap=2048)  # the file is far past 2048 bytes
    assert isinstance(kept, Kept) and len(kept.records) == 200 and bm.faults() == ()
    corrupt = run(meter, OPENAI, "g", data[:40] + b"\x00" * 100 + data[140:], encoding="gzip", cap=2048)
    assert "decode_corrupt" in corrupt.faults()
    unknown = run(meter, OPENAI, "h", data, encoding="br")
    assert unknown.off and "reader_error" in unknown.faults()


def test_a_line_cut_off_by_a_broken_download_is_not_read() -> None:
    meter, kept, _ = make()
    data = wire.jsonl([wire.openai_chat("a", 1, 1), wire.openai_chat("b", 1, 1)])
    bm = BatchMeter(meter, download_exchange(), Download(OPENAI, "f"), 1 << 20, Counted())
    bm.feed(data[:-20])
    bm.close()  # no finish(): the body did not end cleanly
    assert isinstance(kept, Kept) and [r.upstream_request_id for r in kept.records] == ["a"]


def test_a_hundred_thousand_lines_in_flat_memory() -> None:
    journal = Dropped()
    meter, _, _ = make(journal)
    bm = BatchMeter(meter, download_exchange(), Download(OPENAI, "file-big"), 1 << 20, Counted())
    line = wire.openai_chat("request-00000", 1200, 300, cached=200) + b"\n"

    def feed(first: int, count: int) -> None:
        block = bytearray()
        for i in range(first, first + count):
            block += line.replace(b"00000", b"%05d" % i)
            if len(block) >= 65536:  # chunks as a socket gives them, cut mid-line
                bm.feed(bytes(block[:50000]))
                del block[:50000]
        bm.feed(bytes(block))

    feed(0, 40_000)  # warm: every cache and metric series in place
    tracemalloc.start()  # traced for 20,000 lines only: tracing is slow
    try:
        before, _ = tracemalloc.get_traced_memory()
        feed(40_000, 20_000)
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    feed(60_000, 40_000)
    bm.finish()
    assert journal.count == 100_000 and bm.faults() == ()
    # Nothing is kept per line (a record id alone would be 1.6 MB here), and at most a chunk
    # and a line are held at a time.
    assert after - before < 64 * 1024, after - before
    assert peak - before < 1024 * 1024, peak - before
