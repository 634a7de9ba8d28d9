"""A real OTLP/HTTP receiver on 127.0.0.1, decoding with the official protobufs.

It answers POST /v1/traces and /v1/metrics as a collector does and keeps every span it was
sent, its attributes as a plain dict, and the latest (cumulative) count and sum of each
histogram series; `wait_for` polls for a condition (no timed sleeps in tests).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

SERVER, CLIENT = Span.SPAN_KIND_SERVER, Span.SPAN_KIND_CLIENT


@dataclass
class Received:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    status_code: int


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class Receiver:
    def __init__(self) -> None:
        self.spans: list[Received] = []
        self.headers: list[dict[str, str]] = []
        # (metric name, sorted attribute items) -> (count, sum): cumulative, so the latest wins.
        self.histograms: dict[tuple[str, tuple[tuple[str, Any], ...]], tuple[int, float]] = {}
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.path == "/v1/traces":
                    receiver.take(ExportTraceServiceRequest.FromString(body),
                                  {k.lower(): v for k, v in self.headers.items()})
                    answer = ExportTraceServiceResponse().SerializeToString()
                elif self.path == "/v1/metrics":
                    receiver.take_metrics(ExportMetricsServiceRequest.FromString(body))
                    answer = ExportMetricsServiceResponse().SerializeToString()
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def take(self, request: ExportTraceServiceRequest, headers: dict[str, str]) -> None:
        got: list[Received] = []
        for rs in request.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    got.append(Received(s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(), s.name,
                                        s.kind, s.start_time_unix_nano, s.end_time_unix_nano,
                                        {a.key: _value(a.value) for a in s.attributes}, resource, s.status.code))
        with self.lock:
            self.spans += got
            self.headers.append(headers)

    def take_metrics(self, request: ExportMetricsServiceRequest) -> None:
        with self.lock:
            for rm in request.resource_metrics:
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        for p in m.histogram.data_points:
                            attrs = tuple(sorted((a.key, _value(a.value)) for a in p.attributes))
                            self.histograms[(m.name, attrs)] = (p.count, p.sum)

    def histogram(self, name: str, **match: Any) -> tuple[int, float]:
        """Count and sum over the series of `name` whose attributes include `match`."""
        with self.lock:
            got = [v for (n, attrs), v in self.histograms.items()
                   if n == name and all(dict(attrs).get(k) == want for k, want in match.items())]
        return sum(c for c, _ in got), sum(s for _, s in got)

    def wait_for(self, done: Callable[[list[Received]], bool], timeout: float = 60) -> list[Received]:
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                spans = list(self.spans)
            if done(spans) or time.monotonic() > deadline:
                return spans
            time.sleep(0.02)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
