"""Batch result lines, sans-io: any chunking, the line cap, lines that are not results."""

from __future__ import annotations

import random

import orjson
import pytest

from proxy.protocol.batch import (
    ANTHROPIC,
    INVALID,
    NO_USAGE,
    OPENAI,
    Download,
    Lines,
    Result,
    batch_download,
    is_result_file,
    names_results_url,
    read_line,
)
from tests.batch import lines as wire


def split(lines: Lines, data: bytes, sizes: random.Random | None = None) -> list[bytes]:
    out: list[bytes] = []
    at = 0
    while at < len(data):
        n = sizes.randint(1, 40) if sizes else 1
        out += lines.feed(data[at:at + n])
        at += n
    if (last := lines.finish()) is not None:
        out.append(last)
    return out


@pytest.mark.parametrize("seed", range(20))
def test_lines_come_out_whole_however_the_bytes_are_cut(seed: int) -> None:
    rnd = random.Random(seed)
    given = [bytes(rnd.choice(b"ab{}\" \r") for _ in range(rnd.randint(0, 60))).replace(b"\n", b"")
             for _ in range(30)]
    data = b"\n".join(given) + rnd.choice([b"", b"\n"])
    expected = data.split(b"\n")
    if expected[-1] == b"":  # a final newline ends the last line; it does not start another
        expected.pop()
    assert split(Lines(1000), data, rnd) == expected


def test_byte_by_byte_and_a_missing_final_newline() -> None:
    data = wire.jsonl([b'{"a":1}', b'{"b":2}'], final_newline=False)
    assert split(Lines(100), data) == [b'{"a":1}', b'{"b":2}']


def test_a_line_past_the_cap_is_skipped_and_counted_the_next_one_read() -> None:
    lines = Lines(10)
    out = lines.feed(b"0123456789\n")  # exactly the cap: kept
    out += lines.feed(b"0123456789A\nok\n")  # one byte more: skipped
    assert out == [b"0123456789", b"ok"] and lines.over_cap == 1


def test_an_endless_line_is_never_held_past_the_cap() -> None:
    lines = Lines(1000)
    for _ in range(10_000):  # 10 MB without a newline
        assert lines.feed(b"x" * 1000) == []
        assert lines.held <= 1000
    assert lines.over_cap == 1  # one line, counted once
    assert lines.feed(b"tail of it\nnext\n") == [b"next"]
    assert lines.finish() is None


def test_a_long_line_arriving_in_pieces_is_skipped_once() -> None:
    lines = Lines(10)
    assert lines.feed(b"01234") == [] and lines.feed(b"56789") == []
    assert lines.feed(b"AB\nfine") == [] and lines.over_cap == 1
    assert lines.finish() == b"fine"


def test_which_paths_carry_results() -> None:
    assert batch_download("GET", "/v1/files/file-abc/content") == Download(OPENAI, "file-abc")
    assert batch_download("GET", "/v1/messages/batches/msgbatch_01/results") == Download(ANTHROPIC, "msgbatch_01")
    assert batch_download("POST", "/v1/files/file-abc/content") is None
    assert batch_download("GET", "/v1/files/file-abc") is None
    assert batch_download("GET", "/v1/files/a/b/content") is None
    for path in ("/v1/messages/batches", "/v1/messages/batches/msgbatch_01", "/v1/messages/batches/x/cancel"):
        assert names_results_url(path), path
    for path in ("/v1/messages/batches/x/results", "/v1/messages", "/v1/batches/x"):
        assert not names_results_url(path), path


def test_an_openai_chat_result() -> None:
    r = read_line(OPENAI, wire.openai_chat("request-1", prompt=24, completion=8, cached=16))
    assert isinstance(r, Result)
    assert (r.custom_id, r.code, r.created) == ("request-1", 200, float(wire.CREATED))
    u = r.observed.usage
    assert u is not None and (u.input_tokens, u.cache_read_tokens, u.output_tokens) == (8, 16, 8)
    assert r.observed.model == "gpt-test" and r.observed.service_tier == "default"


def test_the_documented_openai_line_exactly() -> None:
    # The example line of OpenAI's batch guide, byte for byte in its shape.
    line = (b'{"id": "batch_req_123", "custom_id": "request-2", "response": {"status_code": 200, "request_id": '
            b'"req_123", "body": {"id": "chatcmpl-123", "object": "chat.completion", "created": 1711652795, '
            b'"model": "gpt-3.5-turbo-0125", "choices": [{"index": 0, "message": {"role": "assistant", "content": '
            b'"Hello."}, "logprobs": null, "finish_reason": "stop"}], "usage": {"prompt_tokens": 22, '
            b'"completion_tokens": 2, "total_tokens": 24}, "system_fingerprint": "fp_123"}}, "error": null}')
    assert is_result_file(line)
    r = read_line(OPENAI, line)
    assert isinstance(r, Result) and r.custom_id == "request-2" and r.created == 1711652795.0
    assert r.observed.usage is not None and (r.observed.usage.input_tokens, r.observed.usage.output_tokens) == (22, 2)


def test_embeddings_and_responses_results() -> None:
    e = read_line(OPENAI, wire.openai_embedding("e1", prompt=9))
    assert isinstance(e, Result) and e.created is None
    assert e.observed.usage is not None and (e.observed.usage.input_tokens, e.observed.usage.output_tokens) == (9, 0)
    r = read_line(OPENAI, wire.openai_responses("r1", inp=30, out=7))
    assert isinstance(r, Result) and r.created == float(wire.CREATED)
    assert r.observed.usage is not None and (r.observed.usage.input_tokens, r.observed.usage.output_tokens) == (30, 7)


def test_the_documented_anthropic_line_exactly() -> None:
    line = (b'{"custom_id":"my-second-request","result":{"type":"succeeded","message":'
            b'{"id":"msg_014VwiXbi91y3JMjcpyGBHX5","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text",'
            b'"text":"Hello again!"}],"stop_reason":"end_turn","stop_sequence":null,'
            b'"usage":{"input_tokens":11,"output_tokens":36}}}}')
    r = read_line(ANTHROPIC, line)
    assert isinstance(r, Result) and (r.custom_id, r.code, r.created) == ("my-second-request", 200, None)
    assert r.observed.usage is not None and (r.observed.usage.input_tokens, r.observed.usage.output_tokens) == (11, 36)
    assert r.observed.model == "claude-sonnet-4-5-20250929"


def test_results_that_bill_nothing() -> None:
    assert read_line(OPENAI, wire.openai_failed("bad")) == NO_USAGE
    assert read_line(OPENAI, orjson.dumps({"id": "x", "custom_id": "c", "response": None,
                                           "error": {"code": "batch_expired", "message": "expired"}})) == NO_USAGE
    assert read_line(ANTHROPIC, wire.anthropic_errored("e")) == NO_USAGE
    assert read_line(ANTHROPIC, wire.anthropic_expired("x")) == NO_USAGE
    assert read_line(OPENAI, b"") is None and read_line(OPENAI, b"  \r") is None


@pytest.mark.parametrize("line", [
    b"{not json", b'{"custom_id": "a", "response": {"status_code": 200, "body": {"usage": {"prompt_tokens": 1',
    b"[1, 2]", b'"text"', b'{"response": {"body": {}}}', b'{"custom_id": 7, "response": {"body": {}}}',
    b'{"custom_id": "a", "response": {"body": "nope"}}', b'{"custom_id": "a", "response": 5}',
    b"\xff\xfe not utf-8",
])
def test_lines_that_are_not_results_are_invalid(line: bytes) -> None:
    assert read_line(OPENAI, line) == INVALID


@pytest.mark.parametrize("line", [b"{not json", b'{"custom_id": "a", "result": 1}',
                                  b'{"custom_id": "a", "result": {"type": "succeeded", "message": []}}'])
def test_anthropic_lines_that_are_not_results(line: bytes) -> None:
    assert read_line(ANTHROPIC, line) == INVALID


def test_an_absurd_count_is_no_usage_not_a_crash() -> None:
    line = wire.openai_chat("big", prompt=10**18, completion=1)
    r = read_line(OPENAI, line)
    assert isinstance(r, Result) and r.observed.usage is not None and "invalid_usage_field" in r.observed.usage.flags


def test_a_file_is_read_only_when_its_first_line_is_a_result() -> None:
    assert is_result_file(wire.openai_chat("a", 1, 1))
    assert is_result_file(orjson.dumps({"id": "x", "custom_id": "c", "response": None, "error": {"code": "x"}}))
    # A batch's input file, a fine-tuning set, an uploaded PDF:
    assert not is_result_file(b'{"custom_id": "request-1", "method": "POST", "url": "/v1/chat/completions", '
                              b'"body": {"model": "gpt-4o-mini", "messages": []}}')
    assert not is_result_file(b'{"messages": [{"role": "user", "content": "hi"}]}')
    assert not is_result_file(b"%PDF-1.7 \x00\x01")
