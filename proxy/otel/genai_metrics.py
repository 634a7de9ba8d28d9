"""The GenAI semantic conventions' metrics, from the same ledger records as the spans.

gen_ai.client.token.usage (by gen_ai.token.type), gen_ai.server.request.duration and
gen_ai.server.time_to_first_token go out over OTLP/HTTP every OTEL_METRIC_EXPORT_INTERVAL
(60 s by default) from the SDK's own thread. Their attributes are bounded as llmmeter's
Prometheus labels are: the model is the price table's canonical model or `other`, never the
client's free text; tenants and tags are on the spans only.
"""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

from proxy.ledger.record import Record
from proxy.otel.attributes import OPERATIONS, Attributes
from proxy.otel.session import BoundedSession

# The conventions' advised bucket boundaries for each histogram.
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
OTHER = "other"


class GenAIMetrics:
    def __init__(self, endpoint: str, headers: dict[str, str] | None, resource: Resource, latest: bool) -> None:
        self.exporter = OTLPMetricExporter(endpoint=endpoint.rstrip("/") + "/v1/metrics", headers=headers,
                                           session=BoundedSession())
        self.provider = MeterProvider(resource=resource, metric_readers=[PeriodicExportingMetricReader(self.exporter)])
        meter = self.provider.get_meter("llmmeter")
        self.provider_key = "gen_ai.provider.name" if latest else "gen_ai.system"
        self.tokens = meter.create_histogram("gen_ai.client.token.usage", "{token}", "Tokens used per call",
                                             explicit_bucket_boundaries_advisory=TOKEN_BUCKETS)
        self.duration = meter.create_histogram("gen_ai.server.request.duration", "s", "Call duration",
                                               explicit_bucket_boundaries_advisory=DURATION_BUCKETS)
        self.ttft = meter.create_histogram("gen_ai.server.time_to_first_token", "s",
                                           "Time to the first content of a stream",
                                           explicit_bucket_boundaries_advisory=TTFT_BUCKETS)

    def record(self, rec: Record, provider: str) -> None:
        base: Attributes = {"gen_ai.operation.name": OPERATIONS.get(rec.endpoint, rec.endpoint),
                            self.provider_key: provider, "gen_ai.request.model": rec.model or OTHER}
        if rec.usage_source != "none":
            self.tokens.record(rec.input_side_tokens, {**base, "gen_ai.token.type": "input"})
            self.tokens.record(rec.output_tokens, {**base, "gen_ai.token.type": "output"})
        failed = {} if rec.outcome == "ok" else {"error.type": rec.outcome}
        self.duration.record(rec.duration_ms / 1000, {**base, **failed})
        if rec.ttft_ms is not None:
            self.ttft.record(rec.ttft_ms / 1000, base)

    def flush(self) -> None:
        self.provider.force_flush(2000)

    def close(self) -> None:
        self.exporter.shutdown()
        self.provider.shutdown()
