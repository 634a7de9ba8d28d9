"""OpenTelemetry export (docs/otel.md): one SERVER span per metered call and a CLIENT child for
its upstream exchange, with GenAI semantic-convention attributes taken from the ledger record.

`attributes` is pure and imports no OpenTelemetry package; `export` imports the
SDK and is loaded only when `[otel] endpoint` is set.
"""
