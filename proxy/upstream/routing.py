"""Routing: which upstream serves a model, and the URL and headers a request goes there with."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence

from proxy.settings import Upstream

# RFC 9110 7.6.1 hop-by-hop headers, plus the ones the client library recomputes.
HOP_BY_HOP = frozenset({
    b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te",
    b"trailer", b"transfer-encoding", b"upgrade", b"proxy-connection",
})
_REQUEST_DROP = HOP_BY_HOP | {b"host", b"content-length"}
_LENGTH_DROP = HOP_BY_HOP | {b"content-length"}  # a body llmmeter edited
_EDITED_DROP = _LENGTH_DROP | {b"content-encoding"}  # ...and relays decoded
_AUTH = frozenset({b"authorization", b"x-api-key"})


class Router:
    """First upstream whose `models` globs match; else the default (one without globs)."""

    def __init__(self, upstreams: Sequence[Upstream]) -> None:
        self.upstreams = tuple(upstreams)
        self.default = next((u for u in self.upstreams if not u.models), None)
        self._cache: dict[str, Upstream | None] = {}

    def route(self, model: str | None) -> Upstream | None:
        if model is None:
            return self.default or (self.upstreams[0] if self.upstreams else None)
        if model in self._cache:
            return self._cache[model]
        found = next((u for u in self.upstreams
                      if any(fnmatch.fnmatchcase(model, g) for g in u.models)), self.default)
        if len(self._cache) < 10_000:  # model names come from clients: bound the memo
            self._cache[model] = found
        return found


_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_PCT = re.compile(rb"%([0-9A-Fa-f]{2})")


def _decode_unreserved(m: re.Match[bytes]) -> bytes:
    byte = int(m.group(1), 16)
    return bytes((byte,)) if byte in _UNRESERVED else m.group(0).upper()


def relay_path(raw_path: bytes, decoded_path: str) -> str | None:
    """The path to forward, or None when it must be refused with 400.

    The raw path itself must start with `/v1/`: checking the decoded one and slicing the raw
    one would let `/%761/x` append `61/x` to the base URL (another port, another path).
    Percent-encoded unreserved characters are decoded (RFC 3986 6.2.2.2: the same URI), so
    what is metered, checked and forwarded is one string. No `.`/`..` segment or empty
    segment passes, encoded or not, in the raw path or the decoded one (a `%2F` an upstream
    decodes must not climb out of its base path either).
    """
    if not raw_path.startswith(b"/v1/"):
        return None
    path = _PCT.sub(_decode_unreserved, raw_path)
    for candidate in (path.decode("latin-1"), decoded_path):
        segments = candidate.split("/")[1:]
        if any(s in (".", "..") for s in segments) or "" in segments[:-1]:
            return None
    return path.decode("latin-1")


def target_url(up: Upstream, path: str, query: bytes) -> str:
    """SPEC "Joining paths": base_url without its /v1, then the client's /v1/<rest>.

    `path` comes from `relay_path`, so it starts with `/v1/`."""
    assert path.startswith("/v1/"), path
    rest = path[len("/v1"):]
    base = up.anthropic_base_url if path.startswith("/v1/messages") and up.anthropic_base_url else up.base_url
    url = base + rest
    return url + "?" + query.decode("latin-1") if query else url


def request_headers(raw: Iterable[tuple[bytes, bytes]], up: Upstream, *, metered: bool,
                    anthropic: bool, strip_client_auth: bool) -> list[tuple[str, str]]:
    """The client's headers minus hop-by-hop, X-LLMMeter-* and (when needed) its keys."""
    raw = list(raw)
    drop = _hop_by_hop(raw, _REQUEST_DROP)
    replace_auth = up.api_key is not None or strip_client_auth
    out: list[tuple[str, str]] = []
    for name, value in raw:
        if name in drop or name.startswith(b"x-llmmeter-"):
            continue
        if replace_auth and name in _AUTH:
            continue
        if metered and name == b"accept-encoding":
            continue
        out.append((name.decode("latin-1"), value.decode("latin-1")))
    if metered:
        # The meter must read the body; ask for it uncompressed (SPEC "HTTP surface").
        out.append(("accept-encoding", "identity"))
    if up.api_key is not None:
        if anthropic:
            out.append(("x-api-key", up.api_key))
        else:
            out.append(("authorization", f"Bearer {up.api_key}"))
    return out


def response_headers(raw: Iterable[tuple[bytes, bytes]], *, body_edited: bool,
                     decoded: bool = False) -> list[tuple[bytes, bytes]]:
    """The upstream's headers (names in lower case, as the client keeps them) minus hop-by-hop
    ones; an edited body loses its length, a decoded one its content coding too."""
    raw = list(raw)
    drop = _hop_by_hop(raw, _EDITED_DROP if decoded else _LENGTH_DROP if body_edited else HOP_BY_HOP)
    return [(name, value) for name, value in raw if name not in drop]


def _hop_by_hop(raw: list[tuple[bytes, bytes]], base: frozenset[bytes]) -> frozenset[bytes]:
    """`base` plus the headers this message's own `Connection` names (RFC 9110 7.6.1)."""
    named = [v.strip().lower() for name, value in raw if name == b"connection" for v in value.split(b",")]
    return base | frozenset(named) if named else base
