"""A misbehaving upstream behind a real llmmeter: what reaches it, what the client gets,
what the ledger says (issue items: no second request, pool limits, streams not held back,
no poisoned connections, malformed responses, compressed bodies)."""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fake_upstream import brotli_stored
from tests.faults.helpers import connections_to, wait_until
from tests.upstream.rogue import Conn, Request, Rogue, answer, raw

CHAT = {"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": "hi"}]}
USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
WAIT = 60  # seconds: a generous deadline for a condition, met at once on an idle machine
REPLY = json.dumps({"id": "c1", "object": "chat.completion", "model": "kimi-k3.1-pro", "usage": USAGE,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "yo"},
                                 "finish_reason": "stop"}]}).encode()


@pytest.fixture
def rogue() -> Iterator[Rogue]:
    with Rogue(answer(body=REPLY)) as r:
        yield r


def config(rogue: Rogue, **upstream: Any) -> str:
    extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in upstream.items())
    return f'[[upstream]]\nname = "rogue"\nbase_url = "{rogue.base_url}"\n{extra}'


def post(proxy: Any, body: Any = None, path: str = "/chat/completions", **kw: Any) -> httpx.Response:
    return httpx.post(proxy.base_url + path, json=CHAT if body is None else body, timeout=WAIT, **kw)


# --- 2. no second upstream request -------------------------------------------------------

def test_a_request_the_upstream_dropped_is_never_sent_again(rogue: Rogue, serve: Any) -> None:
    def hold_then_drop(req: Request, conn: Conn) -> bool:
        if req.index == 1:  # the first request on a connection is answered: it is kept alive
            return answer(body=REPLY)(req, conn)
        time.sleep(0.5)
        return False  # the next one is held, then the connection closed without a byte of answer

    rogue.script = hold_then_drop
    proxy = serve(config=config(rogue))
    assert post(proxy).status_code == 200
    r = post(proxy)  # on the kept-alive connection
    assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_reset"
    time.sleep(0.3)
    assert [(q.connection, q.index) for q in rogue.requests] == [(1, 1), (1, 2)]  # billed once, not twice
    rows = proxy.rows(expect=2)
    assert [(row["outcome"], row["code"]) for row in rows] == [("ok", 200), ("upstream_reset", 502)]


def test_a_pooled_connection_found_closed_is_replaced_before_writing(rogue: Rogue, serve: Any) -> None:
    def answer_then_hang_up(req: Request, conn: Conn) -> bool:
        answer(body=REPLY)(req, conn)
        return False  # keep-alive promised, then the connection closed while idle

    rogue.script = answer_then_hang_up
    proxy = serve(config=config(rogue))
    assert post(proxy).status_code == 200
    # The upstream's close reaches the proxy while the connection is idle: the proxy has closed its end.
    assert wait_until(lambda: rogue.open_now == 0 and connections_to(rogue.port) == 0, timeout=WAIT)
    assert post(proxy).status_code == 200
    assert [(r.connection, r.index) for r in rogue.requests] == [(1, 1), (2, 1)]
    assert {row["outcome"] for row in proxy.rows(expect=2)} == {"ok"}


# --- 4. pool limits -----------------------------------------------------------------------

def test_at_most_max_connections_and_the_rest_wait_in_order(rogue: Rogue, serve: Any) -> None:
    go = threading.Event()

    def held(req: Request, conn: Conn) -> bool:
        go.wait(WAIT)  # answered once the test has seen the others queue, however long they take to arrive
        return answer(body=REPLY)(req, conn)

    rogue.script = held
    # The queued requests wait for a connection as long as the test may take to see them all queue.
    proxy = serve(config=config(rogue, max_connections=2) + f"[server]\nconnect_timeout_s = {WAIT}\n")
    results: list[int] = []

    def one() -> None:
        results.append(post(proxy).status_code)

    threads = [threading.Thread(target=one) for _ in range(10)]
    for t in threads:
        t.start()
    # Two requests hold the two connections; the other eight wait for one.
    assert wait_until(lambda: proxy.metric("llmmeter_upstream_pool_waiting", upstream="rogue") == 8, timeout=WAIT)
    assert len(rogue.requests) == 2
    go.set()
    for t in threads:
        t.join()
    assert results == [200] * 10
    assert rogue.most_open <= 2 and len(rogue.conns) <= 2
    assert proxy.metric("llmmeter_upstream_pool_waiting", upstream="rogue") == 0


def test_a_request_that_waits_too_long_for_a_connection_gets_503(rogue: Rogue, serve: Any) -> None:
    go = threading.Event()

    def held(req: Request, conn: Conn) -> bool:
        go.wait(WAIT)  # the one connection stays busy until the second request has had its answer
        return answer(body=REPLY)(req, conn)

    rogue.script = held
    proxy = serve(config=config(rogue, max_connections=1) + "[server]\nconnect_timeout_s = 0.5\n")
    first = threading.Thread(target=post, args=(proxy,))
    first.start()
    assert wait_until(lambda: len(rogue.requests) == 1, timeout=WAIT)  # the first holds the connection
    r = post(proxy)
    go.set()
    first.join()
    assert r.status_code == 503 and r.json()["error"]["code"] == "upstream_timeout"
    assert len(rogue.requests) == 1
    assert any(row["outcome"] == "upstream_timeout" and row["code"] == 503 for row in proxy.rows(expect=2))


def test_idle_connections_are_closed_after_idle_s(rogue: Rogue, serve: Any) -> None:
    proxy = serve(config=config(rogue, idle_s=0.5))
    assert post(proxy).status_code == 200
    assert wait_until(lambda: rogue.open_now == 0, timeout=WAIT)


def test_an_error_answer_read_whole_keeps_its_connection(rogue: Rogue, serve: Any) -> None:
    rogue.script = answer(429, b'{"error": {"message": "slow down"}}')
    proxy = serve(config=config(rogue))
    for _ in range(3):
        assert post(proxy).status_code == 429
    assert [r.connection for r in rogue.requests] == [1, 1, 1]


# --- 5. unmetered streams are not held back -----------------------------------------------

@pytest.mark.parametrize("ctype, path, first", [
    ("text/event-stream", "/threads/t1/runs", b"event: thread.run.created\ndata: {}\n\n"),
    ("application/x-ndjson", "/other/stream", b'{"n": 1}\n'),
    ("application/octet-stream", "/files/f1/content", b"first part"),
])
def test_each_chunk_reaches_the_client_as_it_arrives(rogue: Rogue, serve: Any, ctype: str, path: str,
                                                     first: bytes) -> None:
    got_first = threading.Event()
    waited: list[bool] = []

    def stream(req: Request, conn: Conn) -> bool:
        conn.send(f"HTTP/1.1 200 OK\r\ncontent-type: {ctype}\r\ntransfer-encoding: chunked\r\n\r\n".encode())
        conn.send(b"%x\r\n%s\r\n" % (len(first), first))
        waited.append(got_first.wait(WAIT))  # the second part waits until the client has the first
        conn.send(b"4\r\nlast\r\n0\r\n\r\n")
        return True

    rogue.script = stream
    proxy = serve(config=config(rogue))
    with httpx.stream("POST", proxy.base_url + path, json={}, timeout=10) as r:
        chunks = r.iter_raw()
        assert next(chunks) == first
        got_first.set()
        assert b"".join(chunks) == b"last"
    assert waited == [True]  # the client had the first part before the second existed


def test_a_length_delimited_body_is_relayed_as_it_arrives(rogue: Rogue, serve: Any) -> None:
    got_first = threading.Event()
    waited: list[bool] = []

    def parts(req: Request, conn: Conn) -> bool:
        if not req.path.endswith("/content"):  # the file object llmmeter asks for first: not a batch's output
            return answer(body=b'{"id": "f1", "object": "file", "purpose": "user_data"}')(req, conn)
        conn.send(b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: 8\r\n\r\nfirst")
        waited.append(got_first.wait(WAIT))
        conn.send(b"end")
        return True

    rogue.script = parts
    proxy = serve(config=config(rogue))
    with httpx.stream("GET", proxy.base_url + "/files/f1/content", timeout=10) as r:
        chunks = r.iter_raw()
        assert next(chunks) == b"first"
        got_first.set()
        assert b"".join(chunks) == b"end"
    assert waited == [True]


# --- 6. no poisoned connections -------------------------------------------------------------

def test_bytes_after_a_response_do_not_reach_the_next_request(rogue: Rogue, serve: Any) -> None:
    smuggled = b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nsmuggled!"

    def two_answers(req: Request, conn: Conn) -> bool:
        if len(rogue.requests) == 1:
            conn.send(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-type: application/json\r\n\r\n{}" + smuggled)
            time.sleep(0.2)
            return True
        return answer(body=b'{"clean": true}')(req, conn)

    rogue.script = two_answers
    proxy = serve(config=config(rogue))
    assert httpx.get(proxy.base_url + "/models").content == b"{}"
    second = httpx.get(proxy.base_url + "/models")
    assert second.json() == {"clean": True}
    assert [r.connection for r in rogue.requests] == [1, 2]


# --- 7. malformed responses ---------------------------------------------------------------

MALFORMED = {
    "cl+te": b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    "duplicate cl": b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n{} ",
    "obs-fold": b"HTTP/1.1 200 OK\r\nx-a: a\r\n b\r\ncontent-length: 2\r\n\r\n{}",
    "garbage head": b"\x16\x03\x01 not http at all\r\n\r\n",
    "101": b"HTTP/1.1 101 Switching Protocols\r\nupgrade: h2c\r\nconnection: upgrade\r\n\r\n",
    "status 799": b"HTTP/1.1 799 Odd\r\ncontent-length: 2\r\n\r\n{}",
    "te identity": b"HTTP/1.1 200 OK\r\ntransfer-encoding: identity\r\n\r\n{}",
}


def test_malformed_responses_get_a_json_502_and_a_record(rogue: Rogue, serve: Any) -> None:
    proxy = serve(config=config(rogue))
    for name, data in MALFORMED.items():
        rogue.script = raw(data)
        r = post(proxy)
        assert r.status_code == 502, name
        assert r.json()["error"]["code"] == "upstream_malformed", (name, r.text)
        m = httpx.post(proxy.base_url + "/messages", timeout=10,
                       json={"model": "kimi-k3.1-pro", "max_tokens": 5, "messages": CHAT["messages"]})
        assert m.status_code == 502 and m.json()["type"] == "error", name
    rows = proxy.rows(expect=2 * len(MALFORMED))
    assert len(rows) == 2 * len(MALFORMED)
    assert {(row["outcome"], row["code"]) for row in rows} == {("upstream_malformed", 502)}
    log = proxy.output()
    assert "Traceback" not in log
    assert sum("malformed" in line for line in log.splitlines()) >= 2 * len(MALFORMED)


def test_legal_odd_responses_relay(rogue: Rogue, serve: Any) -> None:
    proxy = serve(config=config(rogue))
    rogue.script = raw(b"HTTP/1.1 304 Not Modified\r\ncontent-length: 5\r\netag: x\r\n\r\n", keep=True)
    r = httpx.get(proxy.base_url + "/models", timeout=10)
    assert r.status_code == 304 and r.headers["etag"] == "x" and r.content == b""
    rogue.script = raw(b"HTTP/1.1 200 OK\r\nconnection: x-secret, keep-alive\r\nx-secret: 1\r\nx-open: 2\r\n"
                       b"content-length: 2\r\n\r\n{}", keep=True)
    r = httpx.get(proxy.base_url + "/models", timeout=10)
    assert r.status_code == 200 and "x-secret" not in r.headers and r.headers["x-open"] == "2"


# --- 8. compressed bodies -----------------------------------------------------------------

def rss_peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_a_gzip_bomb_is_not_decompressed_past_the_cap(rogue: Rogue, serve: Any) -> None:
    bomb = gzip.compress(b"{" + b" " * (300 * 1024 * 1024), compresslevel=9)
    assert len(bomb) < 400 * 1024
    rogue.script = raw(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\n"
                       b"content-length: %d\r\n\r\n" % len(bomb) + bomb, keep=True)
    proxy = serve(config=config(rogue) + "[server]\nmax_decompressed_mb = 8\n")
    assert proxy.proc is not None
    before = rss_peak_mb(proxy.proc.pid)
    with httpx.stream("POST", proxy.base_url + "/chat/completions", json=CHAT, timeout=20) as r:
        assert r.status_code == 200 and b"".join(r.iter_raw()) == bomb  # relayed as it came
    [row] = proxy.rows(expect=1)
    assert row["usage_source"] == "estimated" and "decode_over_cap" in row["flags"]
    assert rss_peak_mb(proxy.proc.pid) - before < 100


def test_a_corrupt_gzip_body_still_writes_a_record(rogue: Rogue, serve: Any) -> None:
    broken = gzip.compress(REPLY)[:-12] + b"\x00" * 12
    rogue.script = raw(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\n"
                       b"content-length: %d\r\n\r\n" % len(broken) + broken, keep=True)
    proxy = serve(config=config(rogue))
    assert post(proxy).status_code == 200
    [row] = proxy.rows(expect=1)
    assert row["usage_source"] == "estimated" and row["outcome"] == "ok"
    assert "decode_corrupt" in row["flags"]
    assert proxy.metric("llmmeter_metering_faults_total", kind="decode_corrupt") == 1
    assert proxy.metric("llmmeter_metering_faults_total", kind="decode_over_cap") == 0


def test_the_injected_usage_chunk_is_removed_from_a_gzip_stream(rogue: Rogue, serve: Any) -> None:
    events = [
        {"id": "c1", "object": "chat.completion.chunk", "model": "kimi-k3.1-pro",
         "choices": [{"index": 0, "delta": {"content": "yo"}, "finish_reason": None}]},
        {"id": "c1", "object": "chat.completion.chunk", "model": "kimi-k3.1-pro",
         "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {"id": "c1", "object": "chat.completion.chunk", "model": "kimi-k3.1-pro", "choices": [], "usage": USAGE},
    ]
    sse = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    body = gzip.compress(sse)
    seen: list[Any] = []

    def gz_stream(req: Request, conn: Conn) -> bool:
        seen.append(json.loads(req.body))
        conn.send(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\n"
                  b"transfer-encoding: chunked\r\n\r\n")
        for i in range(0, len(body), 50):
            part = body[i:i + 50]
            conn.send(b"%x\r\n%s\r\n" % (len(part), part))
        conn.send(b"0\r\n\r\n")
        return True

    rogue.script = gz_stream
    proxy = serve(config=config(rogue))
    r = post(proxy, {**CHAT, "stream": True})
    assert seen[0]["stream_options"] == {"include_usage": True}  # asked for by the proxy
    assert "content-encoding" not in r.headers
    assert b'"usage"' not in r.content and b"[DONE]" in r.content and b'"yo"' in r.content
    [row] = proxy.rows(expect=1)
    assert (row["input_tokens"], row["output_tokens"], row["usage_source"]) == (11, 7, "upstream")


# --- the raw socket side: a client that never finishes its request ----------------------

def test_nothing_reaches_the_upstream_before_the_body_is_whole(rogue: Rogue, serve: Any) -> None:
    proxy = serve(config=config(rogue))
    with socket.create_connection(("127.0.0.1", proxy.port)) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"model\"")
        time.sleep(0.5)
        assert rogue.requests == []


def test_a_gzip_stream_whose_usage_comes_before_its_end_is_read_not_called_corrupt(rogue: Rogue,
                                                                                  serve: Any) -> None:
    events = [
        {"id": "c1", "object": "chat.completion.chunk", "model": "kimi-k3.1-pro",
         "choices": [{"index": 0, "delta": {"content": "yo"}, "finish_reason": "stop"}]},
        {"id": "c1", "object": "chat.completion.chunk", "model": "kimi-k3.1-pro", "choices": [], "usage": USAGE},
    ]
    z = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip, flushed per event as a streaming server does
    parts = [z.compress(b"data: " + json.dumps(e).encode() + b"\n\n") + z.flush(zlib.Z_SYNC_FLUSH) for e in events]
    parts.append(z.compress(b"data: [DONE]\n\n") + z.flush(zlib.Z_SYNC_FLUSH))
    parts.append(z.flush())  # the gzip trailer after the last event: the stream is done before its body is

    def gz_stream(req: Request, conn: Conn) -> bool:
        conn.send(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\n"
                  b"transfer-encoding: chunked\r\n\r\n")
        for part in parts:
            conn.send(b"%x\r\n%s\r\n" % (len(part), part))
            time.sleep(0.1)  # [DONE] is read (and the record written) before the gzip stream ends
        conn.send(b"0\r\n\r\n")
        return True

    rogue.script = gz_stream
    proxy = serve(config=config(rogue))
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}  # nothing for llmmeter to edit
    with httpx.stream("POST", proxy.base_url + "/chat/completions", json=body, timeout=10) as r:
        assert r.headers["content-encoding"] == "gzip" and gzip.decompress(b"".join(r.iter_raw())).endswith(
            b"data: [DONE]\n\n")
    [row] = proxy.rows(expect=1)
    assert (row["input_tokens"], row["output_tokens"], row["usage_source"]) == (11, 7, "upstream")
    assert "decode_corrupt" not in (row["flags"] or "")


# --- answers without a body: 204, 304 and HEAD ---------------------------------------------

def _two_on_one_connection(port: int, first: bytes) -> tuple[bytes, bytes]:
    """The head of a bodiless answer to `first`, then all that answers a second request sent
    on the same connection (b"" when the proxy closed it instead)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(first)
        head = b""
        while b"\r\n\r\n" not in head and (chunk := s.recv(65536)):
            head += chunk
        try:
            s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            rest = b""
            while chunk := s.recv(65536):
                rest += chunk
        except (BrokenPipeError, ConnectionResetError):
            rest = b""
        return head, rest


@pytest.mark.parametrize(("status", "method"), [(304, "GET"), (204, "GET"), (200, "HEAD")])
def test_an_answer_without_a_body_keeps_its_content_length_promise(rogue: Rogue, serve: Any, status: int,
                                                                   method: str) -> None:
    """A 304 or 204 carries no body whatever its Content-Length says (RFC 9110 8.6), nor does an
    answer to HEAD: relayed without a traceback, and the client's connection stays usable."""
    def bodiless_then_ok(req: Request, conn: Conn) -> bool:
        if req.path == "/v1/models" and req.method == method and req.index == 1:
            conn.send(b"HTTP/1.1 %d X\r\ncontent-length: 5\r\netag: \"v1\"\r\n\r\n" % status)
        else:
            conn.send(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")
        return True

    rogue.script = bodiless_then_ok
    proxy = serve(config=config(rogue))
    head, rest = _two_on_one_connection(
        proxy.port, f"{method} /v1/models HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"v1\"\r\n\r\n".encode())
    assert head.startswith(b"HTTP/1.1 %d " % status) and b'etag: "v1"' in head.lower()
    assert head.endswith(b"\r\n\r\n")  # nothing after the head: there is no body
    assert rest.startswith(b"HTTP/1.1 200 ") and rest.endswith(b"{}")
    log = proxy.output()
    assert "Traceback" not in log and "Content-Length" not in log
    assert [row["code"] for row in proxy.rows(expect=2)] == [status, 200]


# --- a content coding llmmeter cannot decode -------------------------------------------------

def test_a_brotli_answer_is_relayed_untouched_and_estimated(rogue: Rogue, serve: Any) -> None:
    """No brotli decoder is among the locked dependencies: the answer goes on as it came, and
    the record is estimated and says why, not 0 tokens from the upstream."""
    plain = brotli_stored(REPLY)
    frames = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in [
        {"id": "c1", "object": "chat.completion.chunk", "model": "kimi-k3.1-pro",
         "choices": [{"index": 0, "delta": {"content": "yo"}, "finish_reason": None}]},
        {"id": "c1", "object": "chat.completion.chunk", "model": "kimi-k3.1-pro", "choices": [], "usage": USAGE},
    ]) + b"data: [DONE]\n\n"
    streamed = brotli_stored(frames)
    answers = iter([
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: br\r\n"
        b"content-length: %d\r\n\r\n" % len(plain) + plain,
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: br\r\n"
        b"transfer-encoding: chunked\r\n\r\n%x\r\n" % len(streamed) + streamed + b"\r\n0\r\n\r\n",
    ])
    rogue.script = lambda req, conn: raw(next(answers), keep=True)(req, conn)
    proxy = serve(config=config(rogue))
    for body, sent in ((CHAT, plain), ({**CHAT, "stream": True}, streamed)):
        with httpx.stream("POST", proxy.base_url + "/chat/completions", json=body, timeout=20) as r:
            assert r.status_code == 200 and r.headers["content-encoding"] == "br"
            assert b"".join(r.iter_raw()) == sent  # relayed as it came
    rows = proxy.rows(expect=2)
    assert [(row["usage_source"], "decode_unsupported" in row["flags"], row["input_tokens"] > 0)
            for row in rows] == [("estimated", True, True)] * 2
    assert not any("no_usage" in row["flags"] for row in rows)
    assert proxy.metric("llmmeter_metering_faults_total", kind="decode_unsupported") == 2
