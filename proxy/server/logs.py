"""The server's log lines: an upstream failure that aborts a client's stream is one line."""

from __future__ import annotations

import logging

from proxy.errors import StreamBroken


class QuietBrokenStreams(logging.Filter):
    """An aborted client stream after an upstream failure is expected, not a crash: one line,
    no traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, StreamBroken):
            record.exc_info, record.msg, record.args = None, f"stream aborted: {exc}", ()
        return True


def configure() -> None:
    """llmmeter's own lines (start-up, upstream failures) beside uvicorn's, in its format."""
    logger = logging.getLogger("llmmeter")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # not twice, should the root logger have a handler too
