"""llmmeter's own exceptions and the error bodies the proxy itself sends.

    LLMMeterError
     ├── ConfigError        bad config file, flag or environment (file:line, flag or variable in the message)
     ├── PriceTableError    broken price tables (pricing/loader.py; "file:line: what" per error)
     ├── OutputError        an --out that cannot be written, or that is the ledger or its journal
     ├── ledger errors      (proxy/ledger/store/errors.py) StoreUnavailable, RecordRefused,
     │                      LedgerMissing, LedgerOutdated, LedgerTooNew
     └── UpstreamError      the upstream failed this request
          ├── Unreachable   no response: connecting (refused, DNS, TLS, egress proxy) or the
          │                 connection closed before a response byte
          ├── PoolTimeout   every connection to the upstream stayed busy for connect_timeout_s
          ├── Broken        the connection failed after the request was written
          │    └── MalformedResponse   the upstream's bytes are not a valid HTTP/1.1 response
          └── StreamBroken  the relay gave up after the client's response began: its stream is aborted

Commands print an LLMMeterError as one line (exit 2 for what the user gave, 1 for the
ledger's state); any other exception is a bug and keeps its traceback.
Errors the proxy makes itself use the API's own error shape (SPEC "HTTP surface"), so
SDKs raise their usual exceptions.
"""

from __future__ import annotations

import orjson


class LLMMeterError(Exception):
    """Base of everything llmmeter raises on purpose."""


class ConfigError(LLMMeterError):
    """The configuration cannot be used; the message names the file and line."""


class OutputError(LLMMeterError):
    """`report --out` / `export --out` cannot be used; the message names the path and why."""


class UpstreamError(LLMMeterError):
    """The upstream failed a request; the client gets an error in the API's shape and a record is written."""


class Unreachable(UpstreamError):
    """No response came: connecting, sending, or the connection closed before a response byte.

    The message says where (addresses, the egress proxy, the ca_file path) for the log; `what`
    says what failed without naming any of it, for the client's 502, which anyone may read."""

    def __init__(self, message: str, what: str = "the connection to the upstream failed") -> None:
        super().__init__(message)
        self.what = what


class PoolTimeout(UpstreamError):
    """The upstream's `max_connections` stayed busy for `connect_timeout_s`: answered 503."""


class Broken(UpstreamError):
    """The connection failed after the request was written (so it is never sent again)."""


class MalformedResponse(Broken):
    """The upstream sent bytes that are not a valid HTTP/1.1 response (or not one llmmeter relays)."""


class StreamBroken(UpstreamError):
    """Raised after the response started, so the server aborts the client's connection
    instead of ending it cleanly: the client must see the upstream's failure (SPEC)."""


def error_body(message: str, kind: str, code: str, anthropic: bool = False) -> bytes:
    """OpenAI's `{"error": {...}}` or, on /v1/messages, Anthropic's `{"type": "error", ...}`."""
    if anthropic:
        return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})
    return orjson.dumps({"error": {"message": message, "type": kind, "code": code}})
