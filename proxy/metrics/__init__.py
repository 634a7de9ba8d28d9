"""Prometheus metrics: the per-request families (kept in plain objects, exported at scrape
time) and the gauges read from the ledger and the configuration."""
