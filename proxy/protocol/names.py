"""The names the rest of llmmeter agrees on, each said once: endpoints, outcomes, workload
classes and metering faults. They are label values on /metrics and values in the ledger
(SPEC "HTTP surface", "Metrics", "Attribution"), so they never come from a client."""

from __future__ import annotations

from collections.abc import Mapping

# The client's path -> the endpoint it is metered as; any other /v1/* path is "other".
ENDPOINT_PATHS: Mapping[str, str] = {
    "/v1/chat/completions": "chat", "/v1/completions": "completions", "/v1/embeddings": "embeddings",
    "/v1/responses": "responses", "/v1/messages": "messages", "/v1/models": "models",
}
METERED = frozenset({"chat", "completions", "embeddings", "responses", "messages"})
# Batch results downloaded through llmmeter: one record per result line (SPEC "Batch jobs").
BATCH = "batch"
ENDPOINTS = frozenset({*ENDPOINT_PATHS.values(), BATCH, "other"})
# Endpoints whose records carry tokens and a cost: what the ledger's sums call metered.
BILLED = METERED | {BATCH}
CHAT_STYLE = frozenset({"chat", "completions"})  # where llmmeter may ask for the usage chunk

# How a call to an upstream failed (llmmeter_upstream_errors_total{kind}): 5xx and 429, no
# connection, no answer in time, a connection broken after the request was sent, not HTTP.
UPSTREAM_ERROR_KINDS = ("http_error", "unreachable", "timeout", "reset", "malformed")

OUTCOMES = ("ok", "upstream_http_error", "upstream_unreachable", "upstream_timeout", "upstream_reset",
            "upstream_malformed", "upstream_empty", "client_closed", "rejected")
# A 2xx stream that ended with no event at all (not even [DONE]): the upstream produced nothing
# (llama.cpp does this for a prompt past its context), so nothing is estimated or charged.
UPSTREAM_EMPTY = "upstream_empty"
EMPTY_ANSWER = "empty_answer"  # the flag of such a record

# Why a request was refused before a key was known (llmmeter_refusals_total{reason}, and the
# second flag of the ledger's aggregated record beside `aggregated`).
MISSING_KEY = "missing_key"  # no Authorization bearer and no x-api-key
UNKNOWN_KEY = "unknown_key"  # a key no tenant holds
REFUSAL_REASONS = (MISSING_KEY, UNKNOWN_KEY)
AGGREGATED = "aggregated"  # a record that stands for `request_count` requests
UNAUTHENTICATED = "unauthenticated"  # the tenant of a request refused before a key was known

WORKLOADS = ("short", "medium", "long", "very_long")  # by input-side tokens, [workloads] bounds

# A usage field or stream the readers could not use (llmmeter_metering_faults_total{kind}):
# relaying goes on, the record says what happened in its flags.
FAULT_KINDS = frozenset({
    "invalid_usage_field",  # a usage count that is not a count (kept out, the rest read)
    "negative_clamped",  # a subtraction that went below zero, clamped to 0
    "reader_error",  # a response body no usage reader could read
    "tap_event_error",  # a stream event no reader could read
    "decode_corrupt",  # a compressed body that would not decompress
    "decode_over_cap",  # a compressed body past server.max_decompressed_mb
    "decode_unsupported",  # a metered answer in a content coding llmmeter cannot decode (br, zstd)
    "estimate_counter_failed",  # the token counter failed; the count is approximated
    "pricing_failed",  # the price could not be computed; recorded unpriced
    "total_mismatch",  # total_tokens exceeds the categories on an upstream whose hidden_output is "flag"
    "audio_unpriced",  # audio tokens in the counts, priced at the text rates (a lower bound)
    "image_unpriced",  # image tokens in the counts, priced at the text rates (a lower bound)
})
