"""Every spelling of a metered path is metered or refused (SPEC "Version 4 additions").

A server reads `/v1/Chat/Completions/`, `chat%2Fcompletions` or `completions;x` as the chat
endpoint; llmmeter must too, or such a request reaches the upstream as `other`: unmetered
and past an enforced budget that refuses the plain path. Raw bytes go to a real llmmeter in
front of tests/fake_upstream.py: a spelling is metered and forwarded in its normal form, or
refused with 400; behind an exhausted budget, none of them reaches the upstream.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pricing import default_tables_dir
from proxy.protocol.paths import AMBIGUOUS, Classified, classify
from tests.conftest import DATA
from tests.fake_upstream import FakeUpstream
from tests.faults.helpers import raw_http, status_of
from tests.serve import Served

CHAT = json.dumps({"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": "hi"}]}).encode()
EXHAUSTED = ('[[budget]]\nname = "all"\nlimit_usd = "0.000001"\nperiod = "month"\nmode = "enforce"\n'
             'alert_at_pct = [50]\n')
METERED_PATHS = {"/v1/chat/completions": "chat", "/v1/completions": "completions", "/v1/embeddings": "embeddings",
                 "/v1/responses": "responses", "/v1/messages": "messages"}

# The spellings issue 31 names, and their kin: each is the chat endpoint to some server.
NORMALISED = [
    "/v1/chat/completions/", "/v1/chat/completions;x", "/v1/chat/completions;x=1/", "/v1/chat;v=2/completions",
    "/v1/chat%2Fcompletions", "/v1/chat%2fcompletions", "/v1/chat/completions%3Bx", "/v1/chat/completions%3b",
    "/v1/Chat/Completions", "/v1/CHAT/COMPLETIONS/", "/v1/chat%2Fcompletions;x", "/v1/chat%5Ccompletions",
    "/v1/chat\\completions", "/v1/chat/.;/completions", "/v1/models/..;/chat/completions", "/v1/chat/%2e;/completions",
]
# A second decoding, or a cut at a control byte, would make these the chat endpoint: ambiguous.
REFUSED = [
    "/v1/chat%252Fcompletions", "/v1/chat/completions%00", "/v1/chat/completions%0D%0A", "/v1/chat/completions%20",
    "/v1/chat%25252Fcompletions", "/v1/chat/completions%2500", "/v1//chat/completions", "/v1/./chat/completions",
    "/v1/chat/%2e%2e/chat/completions", "/v1/x/..;/..;/..;/etc",
]


def post(path: str, body: bytes = CHAT) -> bytes:
    return (b"POST " + path.encode("latin-1") + b" HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
            b"Connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def test_the_classification_of_each_spelling() -> None:
    for path in NORMALISED:
        assert classify(path) == Classified("/v1/chat/completions", "chat")
    for path in REFUSED:
        if "//" not in path and "/./" not in path and "%2e%2e" not in path:  # those relay_path refuses first
            assert classify(path) == AMBIGUOUS, path
    # Ids keep their case and stay encoded; paths llmmeter does not read go on as they came.
    assert classify("/v1/files/File-Ab;x/Content/") == Classified("/v1/files/File-Ab/content", "other")
    assert classify("/v1/files/a%3F%0D%0A/content") == Classified("/v1/files/a%3F%0D%0A/content", "other")
    assert classify("/v1/models/org%2Fmodel") == Classified("/v1/models/org%2Fmodel", "other")
    assert classify("/v1/chat/completions/chatcmpl-1") == Classified("/v1/chat/completions/chatcmpl-1", "other")
    assert classify("/v1/Messages/") == Classified("/v1/messages", "messages")


def test_each_spelling_is_metered_and_forwarded_in_its_normal_form(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    for path in NORMALISED:
        res = raw_http(proxy.port, post(path))
        assert status_of(res) == 200, (path, res[:300])
    for path in REFUSED:
        res = raw_http(proxy.port, post(path))
        assert status_of(res) == 400 and b'"invalid_path"' in res, (path, res[:300])
    # The upstream served what was metered: the chat endpoint, by its one name.
    assert [r["raw_path"] or r["path"] for r in fake.requests] == ["/v1/chat/completions"] * len(NORMALISED)
    rows = proxy.rows(expect=len(NORMALISED) + len(REFUSED))
    ok = [r for r in rows if r["outcome"] == "ok"]
    assert len(ok) == len(NORMALISED) and {r["endpoint"] for r in ok} == {"chat"}
    assert all(r["cost_units"] is not None and r["input_tokens"] > 0 for r in ok)
    assert {(r["code"], r["endpoint"]) for r in rows if r["outcome"] == "rejected"} == {(400, "other")}


@pytest.fixture(scope="module")
def gated() -> Iterator[tuple[FakeUpstream, Served]]:
    """One llmmeter whose only enforced budget refuses every metered request, for many examples."""
    with tempfile.TemporaryDirectory() as tmp, FakeUpstream() as fake:
        prices = Path(tmp) / "prices"
        prices.mkdir()
        for table in default_tables_dir().iterdir():
            if table.name.endswith(".toml"):
                (prices / table.name).write_bytes(table.read_bytes())
        (prices / "test-models.toml").write_bytes((DATA / "prices" / "test-models.toml").read_bytes())
        config = f'[[upstream]]\nname = "up"\nbase_url = "{fake.base_url}"\n\n' + EXHAUSTED
        with Served(Path(tmp), config=config, args=("--prices", str(prices))) as proxy:
            yield fake, proxy


def test_the_named_spellings_are_budget_gated(gated: tuple[FakeUpstream, Served]) -> None:
    fake, proxy = gated
    before = len(fake.requests)
    for path in ["/v1/chat/completions", *NORMALISED]:
        res = raw_http(proxy.port, post(path))
        assert status_of(res) == 429 and b"budget_exceeded" in res, (path, res[:300])
    assert len(fake.requests) == before


def _spell_char(c: str) -> st.SearchStrategy[str]:
    hexed = f"{ord(c):02X}"
    options = [c, c.upper(), "%" + hexed, "%" + hexed.lower()]
    if c == "/":  # what servers take for a separator
        options = ["/", "%2F", "%2f", "%5C", "%5c", "\\", "/./", "//", "/x/../", "/x/..;/", "/.;/", ";p=1/", "%252F"]
    return st.sampled_from(sorted(set(options)))


@st.composite
def spellings(draw: st.DrawFn) -> str:
    """A metered path spelled as some server would still read it (or might, decoded twice)."""
    path = draw(st.sampled_from(sorted(METERED_PATHS)))
    body = path[len("/v1/"):]
    out = "/v1/" + "".join(draw(_spell_char(c)) for c in body)
    return out + draw(st.sampled_from(["", "/", ";x", "%3Bx", "%3b", "/;a=b", ";", "%252F", "%00", "%2F", "%5C"]))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=spellings())
def test_no_spelling_of_a_metered_path_passes_unmetered(gated: tuple[FakeUpstream, Served], path: str) -> None:
    """Behind a budget that refuses every metered request, a spelling is refused (429 as
    metered, or 400 as ambiguous or invalid) and never reaches the upstream as `other`."""
    fake, proxy = gated
    before = len(fake.requests)
    res = raw_http(proxy.port, post(path))
    assert status_of(res) in (400, 429), (path, res[:300])
    assert len(fake.requests) == before, (path, fake.requests[-1:])
