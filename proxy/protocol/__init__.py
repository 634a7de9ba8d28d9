"""The client-facing wire formats llmmeter reads: SSE framing, the stream tap, and the usage
reports of each API dialect."""
