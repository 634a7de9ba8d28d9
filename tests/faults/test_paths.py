"""Paths a hostile client encodes: what reaches the upstream is what was checked and metered.

A raw-socket client sends every percent-encoding of `/v1/` and of `.`/`..` segments to a real
llmmeter; none may reach the upstream (SPEC "Joining paths"): a raw path sliced by the length
of a decoded prefix would go to `/v161/...`, or to another port with a bare base URL.
"""

from __future__ import annotations

import itertools
import json
from typing import Any
from urllib.parse import unquote

from proxy.upstream.routing import relay_path
from tests.fake_upstream import FakeUpstream
from tests.faults.helpers import raw_http, status_of

CHAT = json.dumps({"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": "hi"}]}).encode()


def _spellings(char: str) -> list[str]:
    hexed = f"{ord(char):02x}"
    return sorted({char, "%" + hexed, "%" + hexed.upper()})


def encoded_v1_prefixes() -> list[str]:
    """Every spelling of `/v1/` but the plain one: each byte literal or %xx in either case."""
    out = {"".join(p) for p in itertools.product(*(_spellings(c) for c in "/v1/"))}
    out.discard("/v1/")
    return sorted(out)


def dot_segment_paths() -> list[str]:
    """`.` and `..` in every spelling, as a whole segment at the start, middle and end."""
    dots = {"".join(p) for n in (1, 2) for p in itertools.product(_spellings("."), repeat=n)}
    paths = []
    for d in sorted(dots):
        paths += [f"/v1/{d}/chat/completions", f"/v1/chat/{d}/completions", f"/v1/chat/completions/{d}",
                  f"/v1/models/x%2F{d}%2F{d}%2Fy", f"/v1/models/{d}%2Fx"]
    return paths


def post(path: str, body: bytes = CHAT) -> bytes:
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
            b"Connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def test_the_spellings_cover_what_they_claim() -> None:
    prefixes = encoded_v1_prefixes()
    assert len(prefixes) == 3 * 2 * 2 * 3 - 1  # "/": itself, %2f, %2F; "v" and "1": itself, %xx (digits)
    assert "/%761/" in prefixes and "/v%31/" in prefixes and "%2Fv1%2f" in prefixes
    assert "/v1/%2e%2E/chat/completions" in dot_segment_paths()


def test_only_a_literal_v1_prefix_is_relayed() -> None:
    for prefix in encoded_v1_prefixes():
        path = prefix + "chat/completions"
        assert relay_path(path.encode(), "/v1/chat/completions") is None, path
    assert relay_path(b"/v1/chat/completions", "/v1/chat/completions") == "/v1/chat/completions"
    assert relay_path(b"/v1", "/v1") is None and relay_path(b"/v10/x", "/v10/x") is None


def test_encoded_unreserved_characters_are_forwarded_decoded() -> None:
    # RFC 3986 6.2.2.2: the same URI; what is metered and what is forwarded must be one path.
    assert relay_path(b"/v1/chat/completion%73", "/v1/chat/completions") == "/v1/chat/completions"
    assert relay_path(b"/v1/models/a%2fb", "/v1/models/a/b") == "/v1/models/a%2Fb"
    assert relay_path(b"/v1/models/caf%c3%a9", "/v1/models/café") == "/v1/models/caf%C3%A9"
    assert relay_path(b"/v1/models/a%0D%0Ab", "/v1/models/a\r\nb") == "/v1/models/a%0D%0Ab"


def test_dot_and_empty_segments_are_refused_in_any_spelling() -> None:
    for path in dot_segment_paths():
        assert relay_path(path.encode(), unquote(path)) is None, path
    assert relay_path(b"/v1//x", "/v1//x") is None
    assert relay_path(b"/v1/models/", "/v1/models/") == "/v1/models/"
    assert relay_path(b"/v1/models/x..y/.z", "/v1/models/x..y/.z") == "/v1/models/x..y/.z"


def test_no_encoding_of_v1_or_of_dots_reaches_an_upstream(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    attempts = [p + "chat/completions" for p in encoded_v1_prefixes()] + dot_segment_paths()
    relayed = 0  # those that decode to /v1/...: the others never reach the relay
    for path in attempts:
        res = raw_http(proxy.port, post(path))
        if path.startswith("/") and unquote(path).startswith("/v1/"):
            relayed += 1
            assert status_of(res) == 400 and b'"invalid_path"' in res, (path, res[:300])
        else:  # %2F first: not a path at all (400 from the HTTP parser), or not /v1/ (404)
            assert status_of(res) in (400, 404), (path, res[:300])
    assert not fake.requests
    assert relayed > len(attempts) // 2
    rows = proxy.rows(expect=relayed)
    assert len(rows) == relayed and {(r["code"], r["outcome"]) for r in rows} == {(400, "rejected")}
    # The plain path and an encoded unreserved character still go through, to the right place.
    for path in ("/v1/chat/completions", "/v1/chat/completion%73"):
        assert status_of(raw_http(proxy.port, post(path))) == 200, path
    assert [r["path"] for r in fake.requests] == ["/v1/chat/completions"] * 2
    metered = proxy.rows(expect=relayed + 2)[-2:]
    assert {(r["endpoint"], r["outcome"]) for r in metered} == {("chat", "ok")}
