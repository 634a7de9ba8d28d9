"""Hostile batch downloads through a running llmmeter: a truncated last line, an endless
line, lines that are not JSON, a client that leaves mid-download, and a 100,000-line file,
each relayed as it came while memory stays flat and every readable result is metered once."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.batch import lines as wire
from tests.batch.upstream import BatchUpstream
from tests.faults.helpers import open_connections, wait_until
from tests.serve import Served
from tests.upstream.rogue import Conn, Request, Rogue

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n"


def good(n: int, prefix: str = "r") -> list[bytes]:
    return [wire.openai_chat(f"{prefix}{i:06d}", prompt=100, completion=10) for i in range(n)]


def results(proxy: Served, expect: int, timeout: float = 10) -> list[str]:
    rows = proxy.rows(expect=expect, timeout=timeout)
    return sorted(r["upstream_request_id"] for r in rows if r["endpoint"] == "batch")


def download(proxy: Served) -> dict[str, Any]:
    [row] = [r for r in proxy.rows() if r["endpoint"] == "other"]
    return row


def vouched(script: Callable[[Request, Conn], bool]) -> Callable[[Request, Conn], bool]:
    """`script` for the file's content; its file object says batch_output, so the content is read as results."""
    def answer(req: Request, conn: Conn) -> bool:
        if req.path.startswith("/v1/files/") and not req.path.endswith("/content"):
            body = b'{"id": "%s", "object": "file", "purpose": "batch_output"}' % req.path.rsplit("/", 1)[1].encode()
            conn.send(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                      % (len(body), body))
            return True
        return script(req, conn)
    return answer


def chunked(pieces: list[bytes], keep: bool = False, end: bool = True) -> Callable[[Request, Conn], bool]:
    def script(req: Request, conn: Conn) -> bool:
        conn.send(HEAD + b"transfer-encoding: chunked\r\n\r\n")
        for p in pieces:
            conn.send(b"%x\r\n%s\r\n" % (len(p), p))
        if end:
            conn.send(b"0\r\n\r\n")
        return keep
    return script


def vm(pid: int, key: str) -> int:
    """A /proc/<pid>/status memory figure in KiB (VmRSS, VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def test_a_truncated_last_line_is_not_metered(meter_for: Any) -> None:
    lines = good(3)
    body = wire.jsonl(lines)

    def script(req: Request, conn: Conn) -> bool:  # promises the whole file, sends all but 25 bytes
        conn.send(HEAD + b"content-length: %d\r\n\r\n" % len(body) + body[:-25])
        return False

    with Rogue(vouched(script)) as rogue:
        proxy = meter_for(rogue.url)
        got = bytearray()
        try:
            with httpx.stream("GET", proxy.base_url + "/files/file-t/content") as r:
                for part in r.iter_raw():
                    got += part
        except httpx.HTTPError:
            pass  # the client's stream is aborted, as the upstream's was
        assert bytes(got) == body[:-25]
        assert results(proxy, expect=3) == ["r000000", "r000001"]
        assert download(proxy)["outcome"] == "upstream_reset"


def test_a_cut_line_at_a_clean_end_is_a_fault_not_a_record(meter_for: Any) -> None:
    # No length, no chunks: the body ends when the connection does, the last line half-sent.
    body = wire.jsonl(good(2)) + wire.openai_chat("cut", 100, 10)[:-40]
    def script(req: Request, conn: Conn) -> bool:
        conn.send(HEAD + b"connection: close\r\n\r\n" + body)
        return False

    with Rogue(vouched(script)) as rogue:
        proxy = meter_for(rogue.url)
        r = httpx.get(proxy.base_url + "/files/file-c/content")
        assert r.content == body
        assert results(proxy, expect=3) == ["r000000", "r000001"]
        assert "reader_error" in download(proxy)["flags"]


def test_lines_that_are_not_json_are_counted_and_skipped(meter_for: Any) -> None:
    lines = good(4)
    pieces = [lines[0] + b"\n", b"{\"custom_id\": \"x\", \"response\": {\"body\": {\"usage\": \n",
              lines[1] + b"\n\x00\xff\xfe garbage\n", b"[]\n" + lines[2] + b"\r\n", lines[3]]
    with Rogue(vouched(chunked(pieces))) as rogue:
        proxy = meter_for(rogue.url)
        r = httpx.get(proxy.base_url + "/files/file-m/content")
        assert r.content == b"".join(pieces)
        assert results(proxy, expect=5) == ["r000000", "r000001", "r000002", "r000003"]
        assert "reader_error" in download(proxy)["flags"]
        assert proxy.metric("llmmeter_metering_faults_total", kind="reader_error") == 3


def test_an_endless_line_is_skipped_in_bounded_memory(meter_for: Any) -> None:
    lines = good(2)
    mib = b"x" * (1024 * 1024)

    def script(req: Request, conn: Conn) -> bool:
        conn.send(HEAD + b"transfer-encoding: chunked\r\n\r\n")
        for p in [lines[0] + b"\n{\"custom_id\": \"endless\", \"pad\": \"", *[mib] * 48, b"\"}\n", lines[1]]:
            conn.send(b"%x\r\n%s\r\n" % (len(p), p))
        conn.send(b"0\r\n\r\n")
        return False

    with Rogue(vouched(script)) as rogue:
        proxy = meter_for(rogue.url, server="max_decompressed_mb = 2")
        assert proxy.proc is not None
        peak_before = vm(proxy.proc.pid, "VmHWM")
        size = 0
        with httpx.stream("GET", proxy.base_url + "/files/file-e/content") as r:
            for part in r.iter_raw():
                size += len(part)
        assert size > 48 * 1024 * 1024
        assert results(proxy, expect=3) == ["r000000", "r000001"]
        assert "decode_over_cap" in download(proxy)["flags"]
        assert proxy.metric("llmmeter_metering_faults_total", kind="decode_over_cap") == 1
        # 48 MiB went through a line cap of 2 MiB: the process never held the line.
        grown = vm(proxy.proc.pid, "VmHWM") - peak_before
        assert grown < 16 * 1024, f"peak RSS grew {grown} KiB"


def test_a_client_that_leaves_mid_download_keeps_what_it_got_and_the_rest_comes_later(meter_for: Any) -> None:
    lines = good(40)
    slow = {"on": True}

    def script(req: Request, conn: Conn) -> bool:
        conn.send(HEAD + b"transfer-encoding: chunked\r\n\r\n")
        try:
            for line in lines:
                p = line + b"\n"
                conn.send(b"%x\r\n%s\r\n" % (len(p), p))
                if slow["on"]:
                    time.sleep(0.05)
            conn.send(b"0\r\n\r\n")
        except OSError:
            pass
        return True

    with Rogue(vouched(script)) as rogue:
        proxy = meter_for(rogue.url)
        seen = 0
        with httpx.stream("GET", proxy.base_url + "/files/file-d/content") as r:
            for part in r.iter_raw():
                seen += part.count(b"\n")
                if seen >= 5:
                    break  # leaves mid-file
        assert wait_until(lambda: len(proxy.rows()) >= 1 and any(x["endpoint"] == "other" for x in proxy.rows()))
        got = results(proxy, expect=6)
        assert 5 <= len(got) < 40 and got == [f"r{i:06d}" for i in range(len(got))]
        assert download(proxy)["outcome"] == "client_closed"
        assert wait_until(lambda: open_connections(rogue.port) == 0, timeout=5)  # the upstream let go
        slow["on"] = False
        r2 = httpx.get(proxy.base_url + "/files/file-d/content")
        assert r2.content == wire.jsonl(lines)
        assert results(proxy, expect=42) == [f"r{i:06d}" for i in range(40)]  # each once
        time.sleep(0.3)
        assert len([x for x in proxy.rows() if x["endpoint"] == "batch"]) == 40


def test_a_hundred_thousand_line_file_streams_through_in_flat_memory(batch_upstream: BatchUpstream,
                                                                      meter_for: Any) -> None:
    line = wire.openai_chat("request-000000", prompt=1200, completion=300, cached=200) + b"\n"
    total = 100_000

    def file() -> Any:
        block = bytearray()
        for i in range(total):
            block += line.replace(b"000000", b"%06d" % i)
            if len(block) >= 256 * 1024:
                yield bytes(block)
                block.clear()
        yield bytes(block)

    batch_upstream.files["file-big"] = file
    proxy = meter_for(batch_upstream.url)
    assert proxy.proc is not None
    pid = proxy.proc.pid
    httpx.get(proxy.base_url + "/files/file-none/content")  # warm the relay's path
    base = vm(pid, "VmRSS")
    size = lines_seen = 0
    rss: list[int] = []
    with httpx.stream("GET", proxy.base_url + "/files/file-big/content", timeout=120) as r:
        for part in r.iter_raw():
            size += len(part)
            lines_seen += part.count(b"\n")
            if len(rss) < lines_seen // 10_000:
                rss.append(vm(pid, "VmRSS"))
    assert size == len(line) * total and lines_seen == total
    assert wait_until(lambda: proxy.metric("llmmeter_requests_total", endpoint="batch") == total, timeout=60)
    # ~70 MB relayed: the process holds a few chunks, never the file, and the download keeps to
    # the ledger's pace, so what it grows by levels off (without the pace: 60 MB and climbing,
    # records waiting in memory for the database).
    grown = [kib - base for kib in rss]
    assert max(grown) < 48 * 1024, grown
    assert max(grown[-3:]) - max(grown[:3]) < 16 * 1024, grown
    rows = proxy.rows(expect=total + 2, timeout=60)
    assert len([r for r in rows if r["endpoint"] == "batch"]) == total


def test_a_batch_object_cut_short_is_a_502_before_any_byte(meter_for: Any) -> None:
    def script(req: Request, conn: Conn) -> bool:  # promises 500 bytes, sends 30, hangs up
        conn.send(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n"
                  b'{"id": "x", "results_url": "ht')
        return False

    with Rogue(script) as rogue:
        proxy = meter_for(rogue.url)
        r = httpx.get(proxy.url + "/v1/messages/batches/x")
        assert r.status_code == 502 and r.json()["type"] == "error"  # Anthropic's error shape
        [row] = proxy.rows(expect=1)
        assert (row["code"], row["outcome"]) == (502, "upstream_reset")
