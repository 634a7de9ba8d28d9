"""Which path a request is, however the client spelled it (SPEC "Version 4 additions").

Servers read one path many ways: they decode `%2F`, drop `;params`, take `\\` for `/`,
ignore case or a trailing `/`, squash `//` and resolve `.`/`..`. A spelling of a metered
path that llmmeter read literally would reach the upstream as a chat request while being
recorded as `other`: unmetered and not budget-gated. So every path is read here in its
*normal form* (all of the above at once); one whose normal form is a path llmmeter reads
is forwarded in that normal form, so that what is metered and what the upstream serves are
one path. A path that only a second decoding (`%252F`) or a cut at a control byte would
turn into a metered one is ambiguous: which it is depends on the upstream, so it is
refused. Sans-io: strings in, a verdict out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, unquote

from proxy.protocol.names import ENDPOINT_PATHS

_PCT = re.compile(r"%[0-9A-Fa-f]{2}")
_CONTROL = re.compile(r"[\x00-\x20\x7f]")
_MAX_DECODES = 4  # %25 nested deeper than this is refused if any decoding of it is still encoded
# Paths read beyond their endpoint: batch results (metered line by line) and batch objects
# (whose results_url is rewritten). Ids keep their case; the fixed words do not matter.
_FILE_CONTENT = re.compile(r"^/v1/files/([^/]+)/content$", re.IGNORECASE)
_RESULTS = re.compile(r"^/v1/messages/batches/([^/]+)/results$", re.IGNORECASE)
_BATCH_OBJECTS = re.compile(r"^/v1/messages/batches(?:/([^/]+)(/cancel)?)?$", re.IGNORECASE)
_OPENAI_BATCHES = re.compile(r"^/v1/batches(?:/([^/]+)(/cancel)?)?$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Classified:
    """`path`: what is forwarded (and read by the batch and results_url code); `endpoint`: what it is metered as."""

    path: str
    endpoint: str


AMBIGUOUS = "ambiguous"


def classify(path: str) -> Classified | str:
    """`path` comes from `relay_path` (starts with `/v1/`, unreserved characters decoded).
    Returns AMBIGUOUS when the request must be refused with 400."""
    normal = _normal(unquote(path, errors="surrogateescape"))
    once = _known(normal)
    if once is not None:
        return once
    if not normal.startswith("/v1/") or _reads_as_known(path):  # `..;` climbing out of /v1 is no path either
        return AMBIGUOUS
    return Classified(path, "other")


def _known(normal: str) -> Classified | None:
    """The normal form rebuilt when it names a path llmmeter reads, else None."""
    endpoint = ENDPOINT_PATHS.get(normal.lower())
    if endpoint is not None:
        return Classified(normal.lower(), endpoint)
    if m := _FILE_CONTENT.match(normal):
        return Classified(f"/v1/files/{_encoded(m.group(1))}/content", "other")
    if m := _RESULTS.match(normal):
        return Classified(f"/v1/messages/batches/{_encoded(m.group(1))}/results", "other")
    for pattern, prefix in ((_BATCH_OBJECTS, "/v1/messages/batches"), (_OPENAI_BATCHES, "/v1/batches")):
        if m := pattern.match(normal):
            return Classified(prefix + (f"/{_encoded(m.group(1))}" if m.group(1) else "")
                              + ("/cancel" if m.group(2) else ""), "other")
    return None


def _encoded(segment: str) -> str:
    """A decoded id made safe for the request line again: `?`, `#`, CR LF and the like stay encoded."""
    return quote(segment.encode("utf-8", "surrogateescape"), safe="-._~!$&'()*+,=:@")


def _reads_as_known(path: str) -> bool:
    """Whether an upstream that decodes more than once, or stops at a control byte, could
    read a path llmmeter reads (a metered one above all) in what llmmeter reads as another."""
    decoded = unquote(path, errors="surrogateescape")
    for _ in range(_MAX_DECODES):
        for variant in (decoded, _CONTROL.split(decoded, maxsplit=1)[0], _CONTROL.sub("", decoded)):
            if _known(_normal(variant)) is not None:
                return True
        if not _PCT.search(decoded):
            return False
        decoded = unquote(decoded, errors="surrogateescape")
    return True  # still encoded after _MAX_DECODES decodings: nothing a client needs


def _normal(decoded: str) -> str:
    """`\\` as `/`, `;params` dropped from each segment, empty and `.` segments dropped, `..`
    resolved (never above `/`), no trailing `/`; the case kept (ids are case-sensitive)."""
    out: list[str] = []
    for segment in decoded.replace("\\", "/").split("/"):
        segment = segment.split(";", 1)[0]
        if segment in ("", "."):
            continue
        if segment == "..":
            if out:
                out.pop()
            continue
        out.append(segment)
    return "/" + "/".join(out)
