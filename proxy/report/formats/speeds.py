"""How the Markdown and HTML reports show a measured speed: a percentile over a handful of
requests, or a time below the ledger's millisecond resolution, is not a figure to size a
deployment by, so it is shown in words."""

from __future__ import annotations

from proxy.report.numbers import count

MIN_REQUESTS = 10  # fewer requests than this: the speed is shown as "too few (n)"


def rate(v: float | None, requests: int, digits: int = 2) -> str:
    """Tokens per second over `requests` requests."""
    if v is None:
        return "-"
    if requests < MIN_REQUESTS:
        return f"too few ({requests})"
    return f"{v:,.{digits}f}"


def millis(v: int, requests: int) -> str:
    """A time to first token over `requests` requests; 0 ms is below the ledger's resolution."""
    if requests < MIN_REQUESTS:
        return f"too few ({requests})"
    return "< 1" if v < 1 else count(v)
