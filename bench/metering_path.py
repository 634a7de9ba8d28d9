"""What each step of metering one non-streamed chat call costs, in µs, with timeit.

    python bench/metering_path.py [--number 20000] [--repeat 5]

Builds llmmeter's parts from default settings (the bundled price tables, no ledger file:
the meter's journal is a list here, so the journal's write and the importer are left
out; bench/relay_cpu.py measures them in place) and times, on the same request and answer
the relay benchmarks use (kimi-k3.1-pro, 1,200 prompt tokens of which 1,000 cached, 50
completion tokens), the steps the relay takes that a no-op relay does not: reading the
path, the request and the answer, pricing and building the record, the metrics. The best
of `--repeat` runs of `--number` calls each, per call.
"""

from __future__ import annotations

import argparse
import sys
import time
import timeit
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402

from pricing import PriceBook, default_tables_dir, load_dir  # noqa: E402
from proxy.ledger.journal import JOURNAL_JSON  # noqa: E402
from proxy.ledger.record import Record  # noqa: E402
from proxy.metering.estimate.estimator import Estimator  # noqa: E402
from proxy.metering.meter import Exchange, Meter  # noqa: E402
from proxy.metrics.metrics import Metrics  # noqa: E402
from proxy.protocol.answer_body import read_answer  # noqa: E402
from proxy.protocol.request_body import read_request  # noqa: E402
from proxy.relay.route import Routes, read_route  # noqa: E402
from proxy.settings import load  # noqa: E402
from proxy.upstream.routing import request_headers, response_headers  # noqa: E402

REQUEST = orjson.dumps({"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": "hello"}]})
ANSWER = orjson.dumps({
    "id": "chatcmpl-a25e0c74ddbe4546bf2d64db", "object": "chat.completion", "created": 1796628339,
    "model": "kimi-k3.1-pro", "choices": [{"index": 0, "message": {"role": "assistant", "content": "tok0 tok1"},
                                           "logprobs": None, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1200, "completion_tokens": 50, "total_tokens": 1250, "cached_tokens": 1000}})
HEADERS = [(b"host", b"127.0.0.1:8080"), (b"user-agent", b"wrk"), (b"content-type", b"application/json"),
           (b"content-length", str(len(REQUEST)).encode())]
ANSWER_HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(ANSWER)).encode()),
                  (b"x-request-id", b"req-1")]


def drive(steps: Any) -> Any:
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--number", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    settings = load(None, env={}, overrides={"upstream": "http://127.0.0.1:9/v1"})
    book = PriceBook(load_dir(default_tables_dir()), dict(settings.tier_aliases))
    metrics = Metrics(settings, book, CollectorRegistry())
    journal: list[Record] = []
    meter = Meter(book, Estimator(settings.estimate.encoding, settings.estimate.per_model), settings.workloads,
                  journal, metrics)  # type: ignore[arg-type]  # a list has append
    up = settings.upstreams[0]
    req, _ = drive(read_request(REQUEST))
    observed, _ = drive(read_answer("chat", ANSWER))

    def exchange() -> Exchange:
        ex = Exchange(start=datetime.now(UTC), t0=time.perf_counter(), endpoint="chat", tenant="default")
        ex.request, ex.request_bytes, ex.model_requested, ex.upstream, ex.code = req, len(REQUEST), \
            "kimi-k3.1-pro", up.name, 200
        return ex

    def record() -> None:
        meter.record(exchange(), observed, observed.usage, "upstream")
        journal.clear()

    rec = meter.record(exchange(), observed, observed.usage, "upstream")
    routes = Routes()
    steps: dict[str, Any] = {
        "path: read_route (relay_path, classify, batch checks)": lambda: read_route(
            "POST", b"/v1/chat/completions", "/v1/chat/completions"),
        "path: Routes, memoised": lambda: routes("POST", b"/v1/chat/completions", "/v1/chat/completions"),
        "exchange: Exchange() with datetime.now and its id": exchange,
        "request: read_request (orjson)": lambda: drive(read_request(REQUEST)),
        "headers: request_headers + response_headers": lambda: (
            request_headers(HEADERS, up, metered=True, anthropic=False, strip_client_auth=False),
            response_headers(ANSWER_HEADERS, body_edited=False)),
        "answer: read_answer (orjson, usage)": lambda: drive(read_answer("chat", ANSWER)),
        "record: Meter.record (model, tier, price, record, metrics)": record,
        "metrics: Metrics.observe alone": lambda: metrics.observe(rec, None, 0.0001),
        "journal: the record's JSON line": lambda: orjson.dumps(rec, option=JOURNAL_JSON),
    }
    for name, fn in steps.items():
        # CPU time of this thread, not wall time: steadier on a shared machine.
        best = min(timeit.repeat(fn, number=a.number, repeat=a.repeat, timer=time.thread_time)) / a.number * 1e6
        print(f"{best:7.2f} µs  {name}")


if __name__ == "__main__":
    main()
