"""The HTTP session the OTLP exporters post with: a collector's answer is read up to a bound.

A collector answers an export with a small protobuf. The SDK's exporters read whatever body
comes back whole into memory, so a collector that is broken or hostile (a body of gigabytes,
or one that never ends) would grow llmmeter's memory without limit. This session reads at most
`MAX_ANSWER_BYTES` of an answer and treats a longer one as a failed export.
"""

from __future__ import annotations

from typing import Any

import requests

MAX_ANSWER_BYTES = 1 << 20  # an OTLP export answer (a partial_success message) is a few bytes


class AnswerTooLarge(requests.exceptions.RequestException):
    pass


class BoundedSession(requests.Session):
    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        kwargs["stream"] = True
        response = super().send(request, **kwargs)
        try:
            body = response.raw.read(MAX_ANSWER_BYTES + 1, decode_content=True)
        finally:
            response.close()
        if len(body) > MAX_ANSWER_BYTES:
            # No URL in the message: it is logged, and a URL may carry the collector's credentials.
            raise AnswerTooLarge(f"the collector's answer exceeds {MAX_ANSWER_BYTES} bytes")
        response._content = body
        return response
