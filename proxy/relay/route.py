"""What a request's method and path mean to the relay, read once per spelling.

Reading a path (`relay_path`, then `classify`: percent-decoding, normal form, the ambiguity
checks) and the batch checks on it cost about 8 µs a request, for what nearly every request
spells the same way (`/v1/chat/completions`). The reading is a pure function of the method,
the raw path and the decoded path, so its answer is kept per spelling: a bounded memo
(paths come from clients; a long one is read every time and never kept).
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.protocol.batch import Download, batch_download, creates_batch, names_output_files, names_results_url
from proxy.protocol.names import METERED
from proxy.protocol.paths import Classified, classify
from proxy.upstream.routing import relay_path

MEMO_ENTRIES = 4096
MEMO_PATH_BYTES = 256  # an id-bearing path (files, batches) is kept too; a longer one is read each time


@dataclass(frozen=True, slots=True)
class Route:
    """`path` None: refused with 400. `endpoint`: what it is metered as ("other" when not a
    metered POST). The rest: the batch paths' needs (proxy/relay/batch.py, provenance.py)."""

    path: str | None
    endpoint: str
    download: Download | None = None
    names_results_url: bool = False
    creates: str | None = None
    output_files: bool = False


def read_route(method: str, raw_path: bytes, decoded_path: str) -> Route:
    # The path as the client encoded it (decoded, %20 or %0D%0A would reach the request
    # line), normalised once: it is what is checked, metered and forwarded. A spelling of a
    # path llmmeter reads (`/v1/Chat/Completions/`, `chat%2Fcompletions;x`) is forwarded in its
    # normal form, so the upstream serves what is metered; an ambiguous one is refused.
    path = relay_path(raw_path, decoded_path)
    seen = None if path is None else classify(path)
    if not isinstance(seen, Classified):
        return Route(None, "other")
    endpoint = seen.endpoint if method == "POST" or seen.endpoint not in METERED else "other"
    p = seen.path
    return Route(p, endpoint, batch_download(method, p), names_results_url(p), creates_batch(method, p),
                 names_output_files(p))


class Routes:
    """`read_route`, memoised per (method, raw path, decoded path); owned by one relay."""

    __slots__ = ("_memo",)

    def __init__(self) -> None:
        self._memo: dict[tuple[str, bytes, str], Route] = {}

    def __call__(self, method: str, raw_path: bytes, decoded_path: str) -> Route:
        key = (method, raw_path, decoded_path)
        found = self._memo.get(key)
        if found is not None:
            return found
        route = read_route(method, raw_path, decoded_path)
        if len(raw_path) <= MEMO_PATH_BYTES and len(decoded_path) <= MEMO_PATH_BYTES:
            if len(self._memo) >= MEMO_ENTRIES:
                self._memo.clear()
            self._memo[key] = route
        return route
