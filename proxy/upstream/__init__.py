"""The upstream side: routing a request to an upstream, and the HTTP/1.1 client that
carries it (pool limits, TLS, egress proxies)."""
