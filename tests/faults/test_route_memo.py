"""The relay reads each spelling of a path once (proxy/relay/route.py): the memo must answer as
a fresh reading does, per method, and stay bounded whatever paths clients send."""

from __future__ import annotations

from proxy.relay.route import MEMO_ENTRIES, MEMO_PATH_BYTES, Routes, read_route

SPELLINGS = [
    ("POST", b"/v1/chat/completions", "/v1/chat/completions"),
    ("GET", b"/v1/chat/completions", "/v1/chat/completions"),
    ("POST", b"/v1/Chat/Completions/", "/v1/Chat/Completions/"),
    ("POST", b"/v1/chat%2Fcompletions;x", "/v1/chat/completions;x"),
    ("POST", b"/v1/chat/%2e%2e/completions", "/v1/chat/../completions"),
    ("POST", b"/v1/chat%252Fcompletions", "/v1/chat%2Fcompletions"),
    ("GET", b"/v1/files/file-abc/content", "/v1/files/file-abc/content"),
    ("GET", b"/v1/messages/batches/msgbatch_1/results", "/v1/messages/batches/msgbatch_1/results"),
    ("POST", b"/v1/messages/batches", "/v1/messages/batches"),
    ("POST", b"/v1/batches", "/v1/batches"),
    ("GET", b"/v1/batches/batch_1", "/v1/batches/batch_1"),
    ("POST", b"/v2/chat/completions", "/v2/chat/completions"),
]


def test_memoised_answers_are_fresh_readings() -> None:
    routes = Routes()
    for _ in range(2):  # the second pass answers from the memo
        for method, raw, decoded in SPELLINGS:
            assert routes(method, raw, decoded) == read_route(method, raw, decoded)
    assert routes("GET", b"/v1/chat/completions", "/v1/chat/completions").endpoint == "other"
    assert routes("POST", b"/v1/chat/completions", "/v1/chat/completions").endpoint == "chat"
    assert routes("POST", b"/v1/chat%252Fcompletions", "/v1/chat%2Fcompletions").path is None
    assert routes("GET", b"/v1/files/file-abc/content", "/v1/files/file-abc/content").download is not None


def test_memo_is_bounded() -> None:
    routes = Routes()
    for i in range(MEMO_ENTRIES * 2 + 7):
        raw = f"/v1/files/file-{i}/content"
        routes("GET", raw.encode(), raw)
        assert len(routes._memo) <= MEMO_ENTRIES
    long = "/v1/files/" + "a" * MEMO_PATH_BYTES + "/content"
    fresh = Routes()
    assert fresh("GET", long.encode(), long) == read_route("GET", long.encode(), long)
    assert not fresh._memo  # a long path is read every time, never kept
