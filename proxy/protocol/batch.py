"""Batch results as they stream through (SPEC "Batch jobs"): which paths carry them, and the
reading of their JSON lines. Sans-io: fed bytes, returns results.

OpenAI batch output files (`GET /v1/files/{id}/content`), one result a line:
    {"id": "batch_req_…", "custom_id": "…", "response": {"status_code": 200, "request_id": "…",
     "body": {<a chat / completions / embeddings / responses body, with usage>}}, "error": null}
Anthropic message-batch results (`GET /v1/messages/batches/{id}/results`):
    {"custom_id": "…", "result": {"type": "succeeded", "message": {<a Message, with usage>}}}
(other result types, errored / canceled / expired, carry no usage and bill nothing).

A line is never held past `cap` bytes: a longer one is skipped up to its newline and counted.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.protocol.usage import Observed, observe

OPENAI, ANTHROPIC = "openai", "anthropic"
# A trailing slash is the same resource to many servers: it must not dodge metering.
_FILE_CONTENT = re.compile(r"^/v1/files/([^/]+)/content/?$")
_RESULTS = re.compile(r"^/v1/messages/batches/([^/]+)/results/?$")
# Paths whose JSON answer is a message-batch object (or a list of them) naming a results_url.
_BATCH_OBJECTS = re.compile(r"^/v1/messages/batches(/[^/]+(/cancel)?)?$")
# Paths whose JSON answer is an OpenAI batch object (or a page of them) naming its output files.
_OPENAI_BATCHES = re.compile(r"^/v1/batches(/[^/]+(/cancel)?)?$")
# Paths a POST to creates a batch; the trailing slash, as ever, must not dodge the owner's record.
_CREATE = {"/v1/batches": OPENAI, "/v1/batches/": OPENAI,
           "/v1/messages/batches": ANTHROPIC, "/v1/messages/batches/": ANTHROPIC}
# What a created batch object says it is, per dialect.
_BATCH_OBJECT = {OPENAI: ("object", "batch"), ANTHROPIC: ("type", "message_batch")}
# The body's `object` -> the usage reader that fits it; without one, the usage's own shape decides.
_OBJECTS = {"chat.completion": "chat", "text_completion": "completions", "response": "responses", "list": "embeddings"}


@dataclass(frozen=True, slots=True)
class Download:
    """A download whose lines are batch results: which dialect, and the file or batch id."""

    kind: str  # OPENAI | ANTHROPIC
    source_id: str
    # The tenant that created the batch through llmmeter: its records are that tenant's,
    # whoever downloads them (None: llmmeter did not see it created, the downloader's).
    owner: str | None = None


def batch_download(method: str, path: str) -> Download | None:
    if method != "GET":
        return None
    if m := _FILE_CONTENT.match(path):
        return Download(OPENAI, m.group(1))
    if m := _RESULTS.match(path):
        return Download(ANTHROPIC, m.group(1))
    return None


def names_results_url(path: str) -> bool:
    """A message-batch path whose answer may name a results_url on the provider's host."""
    return _BATCH_OBJECTS.match(path) is not None


def names_output_files(path: str) -> bool:
    """An OpenAI batch path whose answer names the batch's output_file_id / error_file_id."""
    return _OPENAI_BATCHES.match(path) is not None


def json_object(body: bytes) -> dict[str, Any] | None:
    """`body` as a JSON object; None when it is not JSON or not an object."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def creates_batch(method: str, path: str) -> str | None:
    """The dialect (OPENAI, ANTHROPIC) of a request that creates a batch, else None."""
    return _CREATE.get(path) if method == "POST" else None


def created_batch(kind: str, body: bytes) -> str | None:
    """The id of the batch a creation answer describes; None for anything else."""
    obj = json_object(body)
    if obj is None:
        return None
    key, value = _BATCH_OBJECT[kind]
    batch_id = obj.get("id")
    if obj.get(key) != value or not isinstance(batch_id, str) or not 0 < len(batch_id) <= 256:
        return None
    return batch_id


def output_files(body: bytes) -> list[tuple[str, str]]:
    """(batch id, file id) for each output_file_id and error_file_id an OpenAI batch object
    (or a page of them) names; [] for anything else."""
    obj = json_object(body)
    if obj is None:
        return []
    data = obj.get("data")
    items = [d for d in data if isinstance(d, dict)] if isinstance(data, list) else [obj]
    out = []
    for item in items:
        batch_id = item.get("id")
        if item.get("object") != "batch" or not isinstance(batch_id, str):
            continue
        for key in ("output_file_id", "error_file_id"):
            file_id = item.get(key)
            if isinstance(file_id, str) and 0 < len(file_id) <= 256:
                out.append((batch_id, file_id))
    return out


def is_batch_output(file_object: bytes) -> bool:
    """Whether the upstream's file object (`GET /v1/files/{id}`) says the provider wrote it for a batch."""
    obj = json_object(file_object)
    return obj is not None and obj.get("purpose") == "batch_output"


@dataclass(frozen=True, slots=True)
class Result:
    """One result line that reported usage."""

    custom_id: str
    observed: Observed
    code: int  # the HTTP status the batched request got
    created: float | None  # the body's created / created_at (Unix seconds), None when it has none


INVALID, NO_USAGE = "invalid", "no_usage"


class Lines:
    """Splits a byte stream into lines (LF, CRLF) never holding more than `cap` bytes of one.

    `feed` returns the complete lines; `finish` the unterminated last one, for a body that
    ended cleanly (a file need not end in a newline). `over_cap` counts lines skipped."""

    __slots__ = ("_buf", "_skipping", "cap", "over_cap")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.over_cap = 0
        self._buf = bytearray()
        self._skipping = False  # inside a line past the cap: drop bytes up to its newline

    def feed(self, data: bytes) -> list[bytes]:
        out: list[bytes] = []
        start = 0
        end = len(data)
        while start < end:
            nl = data.find(b"\n", start)
            if nl < 0:
                self._hold(data, start, end)
                break
            if self._skipping:
                self._skipping = False
            elif self._buf:
                self._buf += data[start:nl]
                if len(self._buf) > self.cap:
                    self.over_cap += 1
                else:
                    out.append(bytes(self._buf))
                self._buf.clear()
            elif nl - start > self.cap:
                self.over_cap += 1
            else:
                out.append(data[start:nl])
            start = nl + 1
        return out

    def _hold(self, data: bytes, start: int, end: int) -> None:
        if self._skipping:
            return
        if len(self._buf) + end - start > self.cap:
            self.over_cap += 1
            self._skipping = True
            self._buf = bytearray()  # give the memory back, not just its length
            return
        self._buf += data[start:end]

    def finish(self) -> bytes | None:
        if self._skipping or not self._buf:
            return None
        line = bytes(self._buf)
        self._buf = bytearray()
        return line

    @property
    def held(self) -> int:
        return len(self._buf)


def read_line(kind: str, line: bytes) -> Result | str | None:
    """A Result; INVALID (not JSON, or not a result line); NO_USAGE; None for a blank line."""
    if line.endswith(b"\r"):
        line = line[:-1]
    if not line.strip():
        return None
    obj = json_object(line)
    if obj is None:
        return INVALID
    custom_id = obj.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return INVALID
    if kind == ANTHROPIC:
        return _anthropic(custom_id, obj, line)
    return _openai(custom_id, obj, line)


def is_result_file(first_line: bytes) -> bool:
    """Whether an OpenAI file's first line is a batch result: a file's content may be anything
    (an upload, a batch's input, a fine-tuning set), and one that is not is read no further.
    (Anthropic's results path says what it carries: a bad line there is a fault, not a reason to stop.)"""
    obj = json_object(first_line[:-1] if first_line.endswith(b"\r") else first_line)
    return obj is not None and "custom_id" in obj and ("response" in obj or "error" in obj)


def _openai(custom_id: str, obj: dict[str, object], line: bytes) -> Result | str:
    response = obj.get("response")
    if response is None:
        return NO_USAGE  # a request that failed before it ran ("error" says why)
    if not isinstance(response, dict):
        return INVALID
    body, code = response.get("body"), response.get("status_code")
    if not isinstance(body, dict):
        return INVALID
    status = code if type(code) is int and 100 <= code <= 599 else 200
    observed = observe(_endpoint(body), body, line)
    if observed is None:
        return INVALID
    if observed.usage is None:
        return NO_USAGE
    return Result(custom_id, observed, status, _created(body.get("created", body.get("created_at"))))


def _anthropic(custom_id: str, obj: dict[str, object], line: bytes) -> Result | str:
    result = obj.get("result")
    if not isinstance(result, dict):
        return INVALID
    if result.get("type") != "succeeded":
        return NO_USAGE  # errored, canceled, expired: nothing ran, nothing is billed
    message = result.get("message")
    if not isinstance(message, dict):
        return INVALID
    observed = observe("messages", message, line)
    if observed is None:
        return INVALID
    if observed.usage is None:
        return NO_USAGE
    return Result(custom_id, observed, 200, None)  # a Message has no creation time


def _endpoint(body: dict[str, object]) -> str:
    kind = body.get("object")
    if isinstance(kind, str) and kind in _OBJECTS:
        return _OBJECTS[kind]
    usage = body.get("usage")
    return "responses" if isinstance(usage, dict) and "input_tokens" in usage else "chat"


def _created(value: object) -> float | None:
    if type(value) is int and abs(value) < 2**53:
        return float(value)
    if type(value) is float and math.isfinite(value):
        return value
    return None
