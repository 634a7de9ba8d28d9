"""A small real HTTP server speaking the providers' wire formats, for tests and benchmarks.

It answers OpenAI Chat Completions, legacy Completions, Embeddings, the Responses API,
Anthropic Messages and /v1/models, streamed and not, with the usage shape of the
dialect its model name implies: `gpt-*` OpenAI, `kimi-*` Moonshot, `deepseek-*`
DeepSeek, anything else vLLM/llama.cpp (`llama*` adds llama-server's `timings`). As
OpenAI does, a chat or completions stream carries a usage chunk only when the request
asked for `stream_options.include_usage`.

Request headers steer it (all optional; flags count unless "0"/"false"):
  x-fake-usage       JSON {"prompt", "cached", "cache_write", "completion", "reasoning"};
                     "prompt" is the whole prompt, cached and cache-write tokens included,
                     in every dialect (so Anthropic input_tokens = prompt - cached - cache_write);
                     also "cache_write_1h" and "web_search" (Anthropic: cache_creation's 1-hour
                     writes, server_tool_use.web_search_requests) and "cost" (usage.cost, as
                     OpenRouter reports it, in the OpenAI dialects); "audio_prompt",
                     "audio_completion", "image_prompt" (OpenAI chat and Responses:
                     audio_tokens / image_tokens of the details, already inside the counts)
  x-fake-chunks      content deltas in a stream (default 4)
  x-fake-delay-ms    pause between stream events, and before a plain reply
  x-fake-status      reply with this HTTP status and the dialect's error body
  x-fake-reset-after drop the connection after this many stream events (no final chunk)
  x-fake-hang        park before the response headers until release() or the client leaves
  x-fake-hold        send headers and the first event, then park until release()
  x-fake-no-usage    report no usage at all
  x-fake-usage-in-choice  chat: usage on the chunk that still has choices (plain: in choices[0])
  x-fake-service-tier / x-fake-speed / x-fake-model   reported in the response
  x-fake-gzip        gzip a plain body even though identity was asked for
  x-fake-word        the content deltas are "<word>0 ", "<word>1 ", ... (default "tok")
  x-fake-error-usage with x-fake-status: the error body also carries the dialect's usage
  x-fake-empty-stream a streamed request gets 200 and an event stream with no event at all
                     (not even [DONE]), as llama-server answers a prompt past its context

Run standalone (for bench/relay.py): python tests/fake_upstream.py --port 9000
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gzip
import itertools
import logging
import struct
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import orjson
import uvicorn

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Event = tuple[str | None, Any]  # (SSE event name or None, JSON-able data or a literal string)
MODELS = ("kimi-k3.1-pro", "gpt-test", "deepseek-test", "llama-test", "smollm2")
ANTHROPIC_ERRORS = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                    529: "overloaded_error"}


class _Reset(Exception):
    """Raised after the response started: uvicorn then closes the socket mid-body."""


class _QuietReset(logging.Filter):
    """A deliberate reset is not a server bug: keep its traceback out of the test output."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], _Reset))


def _flag(headers: dict[str, str], name: str) -> bool:
    value = headers.get(name)
    return value is not None and value.strip().lower() not in ("", "0", "false", "no")


def brotli_stored(data: bytes) -> bytes:
    """`data` as a valid brotli stream (RFC 7932) of uncompressed meta-blocks: a `br` body
    made without a brotli encoder, which the locked dependencies do not have."""
    out = bytearray()
    bits = [0]  # WBITS: one 0 bit, a 64 KiB window

    def field(value: int, n: int) -> None:  # brotli packs fields from the least significant bit
        bits.extend((value >> i) & 1 for i in range(n))

    def to_byte_boundary() -> None:
        bits.extend([0] * (-len(bits) % 8))
        out.extend(sum(b << i for i, b in enumerate(bits[j:j + 8])) for j in range(0, len(bits), 8))
        bits.clear()

    for i in range(0, len(data), 65536):
        block = data[i:i + 65536]
        field(0, 1)  # ISLAST: no
        field(0, 2)  # MNIBBLES: 4
        field(len(block) - 1, 16)  # MLEN - 1
        field(1, 1)  # ISUNCOMPRESSED
        to_byte_boundary()
        out += block
    field(1, 1)  # ISLAST
    field(1, 1)  # ISLASTEMPTY
    to_byte_boundary()
    return bytes(out)


def _words(obj: Any) -> int:
    """A deterministic stand-in for a prompt's token count: the words in its strings."""
    if isinstance(obj, str):
        return len(obj.split())
    if isinstance(obj, dict):
        return sum(_words(v) for k, v in obj.items() if k != "model")
    if isinstance(obj, list):
        return sum(_words(v) for v in obj)
    return 0


class FakeUpstream:
    def __init__(self, port: int = 0, defaults: dict[str, str] | None = None, record: bool = True) -> None:
        self.port = port
        self.defaults = {k.lower(): v for k, v in (defaults or {}).items()}  # x-fake-* a request did not send
        self.record = record  # False for long benchmark runs: `requests` would grow without bound
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0  # requests being answered now (TCP connections are not visible to ASGI)
        # Requests waiting in park() now: a test waits until a request is parked rather than for a fixed time.
        self.parked = 0
        self._released = threading.Event()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------
    def _config(self) -> uvicorn.Config:
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning",
                                lifespan="off", access_log=False, interface="asgi3")
        # Config configures logging, so the filter goes on afterwards.
        log = logging.getLogger("uvicorn.error")
        if not any(isinstance(f, _QuietReset) for f in log.filters):
            log.addFilter(_QuietReset())
        return config

    def start(self) -> FakeUpstream:
        self._server = uvicorn.Server(self._config())
        self._thread = threading.Thread(target=self._server.run, name="fake-upstream", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("fake upstream did not start")
            time.sleep(0.005)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def serve_forever(self) -> None:
        """Serve until interrupted, after one line on stdout that says where."""
        self.start()
        print(f"fake upstream listening on {self.base_url} (OpenAI and Anthropic paths; Ctrl-C stops it)",
              flush=True)
        assert self._thread is not None
        try:
            self._thread.join()
        except KeyboardInterrupt:
            self.stop()

    def stop(self) -> None:
        self._released.set()  # parked requests finish, so shutdown does not wait on them
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=5)
            self._server = self._thread = None

    def __enter__(self) -> FakeUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def release(self) -> None:
        """Let every parked (x-fake-hang / x-fake-hold) request go on; later ones do not park."""
        self._released.set()

    async def park(self, gone: asyncio.Future[Any]) -> bool:
        """Wait for release(): True, or False if the client hung up (`gone` done) first."""
        self.parked += 1
        try:
            while not self._released.is_set():
                if gone.done():
                    return False
                await asyncio.sleep(0.005)
            return True
        finally:
            self.parked -= 1

    # -- ASGI ------------------------------------------------------------------
    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = bytearray()
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        headers = {**self.defaults, **headers} if self.defaults else headers
        try:
            parsed = orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            parsed = None
        if self.record:
            self.requests.append({"method": scope["method"], "path": scope["path"],
                                  "query": scope.get("query_string", b"").decode("latin-1"), "headers": headers,
                                  "raw_path": scope.get("raw_path", b"").decode("latin-1"),
                                  "json": parsed, "body": bytes(body)})
        self.in_flight += 1
        exchange = _Exchange(self, scope, headers, parsed, receive, send)
        try:
            await exchange.run()
        finally:
            self.in_flight -= 1
            if exchange.watch is not None:
                exchange.watch.cancel()


class _Exchange:
    """One request and its reply."""

    def __init__(self, fake: FakeUpstream, scope: Scope, headers: dict[str, str], req: Any,
                 receive: Receive, send: Send) -> None:
        self.fake, self.h, self.receive, self.send = fake, headers, receive, send
        self.method: str = scope["method"]
        self.path: str = scope["path"]
        self.req: dict[str, Any] = req if isinstance(req, dict) else {}
        self.rid = uuid.uuid4().hex[:24]
        self.model = str(self.req.get("model") or "unknown")
        self.out_model = headers.get("x-fake-model", self.model)
        self.stream = self.req.get("stream") is True
        self.anthropic = self.path == "/v1/messages"
        self.delay = int(headers.get("x-fake-delay-ms", "0")) / 1000
        word = headers.get("x-fake-word", "tok")
        self.pieces = [f"{word}{i} " for i in range(int(headers.get("x-fake-chunks", "4")))]
        self.text = "".join(self.pieces)
        given = orjson.loads(headers["x-fake-usage"]) if "x-fake-usage" in headers else {}
        # None means "not given": some dialects then leave the field out.
        self.prompt: int = given.get("prompt", _words(self.req) + 1)
        self.cached: int | None = given.get("cached")
        self.cache_write: int | None = given.get("cache_write")
        self.completion: int = given.get("completion", len(self.pieces))
        self.reasoning: int | None = given.get("reasoning")
        self.cache_write_1h: int = given.get("cache_write_1h", 0)
        self.web_search: int = given.get("web_search", 0)
        self.cost: str | None = given.get("cost")
        self.audio_prompt: int = given.get("audio_prompt", 0)
        self.audio_completion: int = given.get("audio_completion", 0)
        self.image_prompt: int | None = given.get("image_prompt")
        self.no_usage = _flag(headers, "x-fake-no-usage")
        self.hold = _flag(headers, "x-fake-hold")
        self.service_tier = headers.get("x-fake-service-tier")
        self.watch: asyncio.Future[Any] | None = None

    def gone(self) -> asyncio.Future[Any]:
        """A future that completes when the client hangs up."""
        # With the body read, uvicorn's receive() returns only once the client disconnects.
        if self.watch is None:
            self.watch = asyncio.ensure_future(self.receive())
        return self.watch

    async def run(self) -> None:
        if _flag(self.h, "x-fake-hang") and not await self.fake.park(self.gone()):
            return
        if self.delay and not self.stream:
            await asyncio.sleep(self.delay)
        if "x-fake-status" in self.h:
            return await self.error(int(self.h["x-fake-status"]))
        if self.method == "GET" and self.path == "/v1/models":
            return await self.models()
        route = {"/v1/chat/completions": self.chat, "/v1/completions": self.completions,
                 "/v1/embeddings": self.embeddings, "/v1/responses": self.responses,
                 "/v1/messages": self.messages}.get(self.path)
        if route is None or self.method != "POST":
            return await self.error(404, f"Unknown request URL: {self.method} {self.path}")
        await route()

    # -- plumbing --------------------------------------------------------------
    async def start(self, status: int, ctype: bytes, extra: list[tuple[bytes, bytes]]) -> None:
        rid = b"req_" + self.rid.encode()
        headers = [(b"content-type", ctype), (b"x-request-id", rid), (b"openai-processing-ms", b"3"), *extra]
        if self.anthropic:
            headers.append((b"request-id", rid))  # Anthropic's own name for it
        await self.send({"type": "http.response.start", "status": status, "headers": headers})

    async def json(self, obj: Any, status: int = 200, extra: list[tuple[bytes, bytes]] | None = None) -> None:
        body = orjson.dumps(obj)
        headers = list(extra or [])
        gzip_asked = self.path == "/v1/models" and "gzip" in self.h.get("accept-encoding", "")
        if gzip_asked or _flag(self.h, "x-fake-gzip"):
            body = gzip.compress(body, compresslevel=1)
            headers.append((b"content-encoding", b"gzip"))
        headers.append((b"content-length", str(len(body)).encode()))
        await self.start(status, b"application/json", headers)
        if self.hold and not await self.fake.park(self.gone()):
            return
        await self.send({"type": "http.response.body", "body": body})

    async def sse(self, events: list[Event]) -> None:
        await self.start(200, b"text/event-stream; charset=utf-8",
                         [(b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")])
        if _flag(self.h, "x-fake-empty-stream"):
            events = []
        reset_after = int(self.h.get("x-fake-reset-after", "-1"))
        gone = self.gone()
        for i, (name, data) in enumerate(events):
            if gone.done():
                return  # nobody is listening: stop rather than pace out the rest
            if i == reset_after:
                raise _Reset("x-fake-reset-after")
            payload = data.encode() if isinstance(data, str) else orjson.dumps(data)
            frame = (b"event: " + name.encode() + b"\n" if name else b"") + b"data: " + payload + b"\n\n"
            await self.send({"type": "http.response.body", "body": frame, "more_body": True})
            if i == 0 and self.hold:
                if not await self.fake.park(gone):
                    return
            elif self.delay:
                await asyncio.sleep(self.delay)
        await self.send({"type": "http.response.body", "body": b""})

    async def error(self, status: int, message: str | None = None) -> None:
        message = message or f"fake upstream error {status}"
        err: dict[str, str | None]
        if self.anthropic:
            kind = ANTHROPIC_ERRORS.get(status, "api_error")
            body: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message},
                                    "request_id": "req_" + self.rid}
            if _flag(self.h, "x-fake-error-usage"):
                body["usage"] = self.anthropic_usage(self.completion)
            return await self.json(body, status)
        if status == 429:
            err = {"message": message, "type": "requests", "code": "rate_limit_exceeded"}
        elif status >= 500:
            err = {"message": message, "type": "server_error", "code": None}
        else:
            code = {401: "invalid_api_key", 404: "not_found"}.get(status)
            err = {"message": message, "type": "invalid_request_error", "code": code}
        extra = [(b"retry-after", b"1")] if status == 429 else []
        reply: dict[str, Any] = {"error": {**err, "param": None}}
        if _flag(self.h, "x-fake-error-usage"):
            reply["usage"] = self.response("completed", None)["usage"] if self.path == "/v1/responses" \
                else self.openai_usage()
        await self.json(reply, status, extra)

    # -- usage per dialect -----------------------------------------------------
    def openai_usage(self) -> dict[str, Any]:
        usage: dict[str, Any] = {"prompt_tokens": self.prompt, "completion_tokens": self.completion,
                                 "total_tokens": self.prompt + self.completion}
        if self.cost is not None:
            usage["cost"] = float(self.cost)
        cached = self.cached or 0
        if self.model.startswith("gpt-"):
            details = {"cached_tokens": cached, "audio_tokens": self.audio_prompt}
            if self.cache_write is not None:
                details["cache_write_tokens"] = self.cache_write
            if self.image_prompt is not None:
                details["image_tokens"] = self.image_prompt
            usage["prompt_tokens_details"] = details
            usage["completion_tokens_details"] = {"reasoning_tokens": self.reasoning or 0,
                                                  "audio_tokens": self.audio_completion,
                                                  "accepted_prediction_tokens": 0,
                                                  "rejected_prediction_tokens": 0}
        elif self.model.startswith("kimi-"):
            if self.cached is not None:
                usage["cached_tokens"] = self.cached
        elif self.model.startswith("deepseek-"):
            usage["prompt_cache_hit_tokens"] = cached
            usage["prompt_cache_miss_tokens"] = self.prompt - cached
            if self.reasoning is not None:
                usage["completion_tokens_details"] = {"reasoning_tokens": self.reasoning}
        return usage

    def timings(self) -> dict[str, float]:
        """llama-server's per-request speed report, made up but self-consistent."""
        cached = self.cached or 0
        return {"cache_n": cached, "prompt_n": self.prompt - cached, "prompt_ms": 12.5,
                "prompt_per_token_ms": 12.5 / max(1, self.prompt - cached),
                "prompt_per_second": max(1, self.prompt - cached) / 0.0125, "predicted_n": self.completion,
                "predicted_ms": 20.0 * self.completion, "predicted_per_token_ms": 20.0,
                "predicted_per_second": 50.0}

    def head(self, obj: str, prefix: str = "chatcmpl-") -> dict[str, Any]:
        out: dict[str, Any] = {"id": prefix + self.rid, "object": obj, "created": int(time.time()),
                               "model": self.out_model}
        if self.service_tier is not None:
            out["service_tier"] = self.service_tier
        if self.model.startswith(("gpt-", "llama")):
            out["system_fingerprint"] = "fp_fake0001"
        return out

    def include_usage(self) -> bool:
        options = self.req.get("stream_options")
        return isinstance(options, dict) and options.get("include_usage") is True and not self.no_usage

    # -- routes ----------------------------------------------------------------
    async def models(self) -> None:
        await self.json({"object": "list", "data": [{"id": m, "object": "model", "created": 1761177600,
                                                      "owned_by": "fake"} for m in MODELS]})

    async def chat(self) -> None:
        in_choice = _flag(self.h, "x-fake-usage-in-choice") and not self.no_usage
        llama = self.model.startswith("llama")
        if not self.stream:
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": self.text},
                                      "logprobs": None, "finish_reason": "stop"}
            body = {**self.head("chat.completion"), "choices": [choice]}
            if in_choice:
                choice["usage"] = self.openai_usage()
            elif not self.no_usage:
                body["usage"] = self.openai_usage()
            if llama:
                body["timings"] = self.timings()
            return await self.json(body)
        want_usage = self.include_usage()
        head = self.head("chat.completion.chunk")

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            c = {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
            if want_usage:
                c["usage"] = None  # OpenAI marks every chunk but the usage one this way
            return c

        # OpenAI opens with an empty content string; llama.cpp (the fixture) with the role alone.
        first = {"role": "assistant"} if self.model.startswith(("llama", "smollm2")) else {"role": "assistant",
                                                                                           "content": ""}
        events: list[Event] = [(None, chunk(first))]
        events += [(None, chunk({"content": p})) for p in self.pieces]
        last = chunk({}, "stop")
        if in_choice:
            last["usage"] = self.openai_usage()
        if llama:
            last["timings"] = self.timings()
        events.append((None, last))
        if want_usage and not in_choice:
            events.append((None, {**head, "choices": [], "usage": self.openai_usage()}))
        events.append((None, "[DONE]"))
        await self.sse(events)

    async def completions(self) -> None:
        head = self.head("text_completion", "cmpl-")
        if not self.stream:
            body = {**head, "choices": [{"index": 0, "text": self.text, "logprobs": None, "finish_reason": "stop"}]}
            if not self.no_usage:
                body["usage"] = self.openai_usage()
            return await self.json(body)
        want_usage = self.include_usage()

        def chunk(text: str, finish: str | None = None) -> dict[str, Any]:
            c = {**head, "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]}
            if want_usage:
                c["usage"] = None
            return c

        events: list[Event] = [(None, chunk(p)) for p in self.pieces]
        events.append((None, chunk("", "stop")))
        if want_usage:
            events.append((None, {**head, "choices": [], "usage": self.openai_usage()}))
        events.append((None, "[DONE]"))
        await self.sse(events)

    async def embeddings(self) -> None:
        given = self.req.get("input")
        items = given if isinstance(given, list) else [given]
        as_base64 = self.req.get("encoding_format") == "base64"  # the openai SDK asks for this by default
        data = []
        dims = self.req.get("dimensions") if isinstance(self.req.get("dimensions"), int) else 8
        for i in range(len(items)):
            # Powers of two survive float32 exactly, so base64 and float replies agree.
            vector = [(-1) ** j * (i + 1) / 2 ** (j % 60 + 3) for j in range(dims)]
            value: Any = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode() if as_base64 else vector
            data.append({"object": "embedding", "index": i, "embedding": value})
        body: dict[str, Any] = {"object": "list", "data": data, "model": self.out_model}
        if not self.no_usage:
            body["usage"] = {"prompt_tokens": self.prompt, "total_tokens": self.prompt}
        await self.json(body)

    def response(self, status: str, text: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": "resp_" + self.rid, "object": "response", "created_at": int(time.time()), "status": status,
            "model": self.out_model, "output": [], "parallel_tool_calls": True, "tool_choice": "auto",
            "tools": [], "error": None, "incomplete_details": None, "instructions": None, "metadata": {},
            "temperature": 1.0, "top_p": 1.0, "usage": None,
        }
        if self.service_tier is not None:
            out["service_tier"] = self.service_tier
        if text is not None:
            out["output"] = [{"type": "message", "id": "msg_" + self.rid, "status": "completed",
                              "role": "assistant",
                              "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}]
        if status == "completed" and not self.no_usage:
            details = {"cached_tokens": self.cached or 0}
            if self.cache_write is not None:
                details["cache_write_tokens"] = self.cache_write
            if self.audio_prompt:
                details["audio_tokens"] = self.audio_prompt
            if self.image_prompt is not None:
                details["image_tokens"] = self.image_prompt
            output_details = {"reasoning_tokens": self.reasoning or 0}
            if self.audio_completion:
                output_details["audio_tokens"] = self.audio_completion
            out["usage"] = {"input_tokens": self.prompt, "input_tokens_details": details,
                            "output_tokens": self.completion,
                            "output_tokens_details": output_details,
                            "total_tokens": self.prompt + self.completion}
        return out

    async def responses(self) -> None:
        if not self.stream:
            return await self.json(self.response("completed", self.text))
        seq = itertools.count()
        item = {"type": "message", "id": "msg_" + self.rid, "status": "in_progress", "role": "assistant",
                "content": []}
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        done_part = {**part, "text": self.text}
        where = {"item_id": item["id"], "output_index": 0, "content_index": 0}

        def ev(kind: str, **fields: Any) -> Event:
            return kind, {"type": kind, "sequence_number": next(seq), **fields}

        events = [ev("response.created", response=self.response("in_progress", None)),
                  ev("response.in_progress", response=self.response("in_progress", None)),
                  ev("response.output_item.added", output_index=0, item=item),
                  ev("response.content_part.added", part=part, **where)]
        events += [ev("response.output_text.delta", delta=p, logprobs=[], **where) for p in self.pieces]
        events += [ev("response.output_text.done", text=self.text, logprobs=[], **where),
                   ev("response.content_part.done", part=done_part, **where),
                   ev("response.output_item.done", output_index=0,
                      item={**item, "status": "completed", "content": [done_part]}),
                   ev("response.completed", response=self.response("completed", self.text))]
        await self.sse(events)

    def anthropic_usage(self, output: int) -> dict[str, Any]:
        cached, written, hour = self.cached or 0, self.cache_write or 0, self.cache_write_1h
        usage: dict[str, Any] = {"input_tokens": max(0, self.prompt - cached - written - hour),
                                 "cache_creation_input_tokens": written + hour, "cache_read_input_tokens": cached,
                                 "output_tokens": output, "service_tier": self.service_tier or "standard"}
        if hour:
            usage["cache_creation"] = {"ephemeral_5m_input_tokens": written, "ephemeral_1h_input_tokens": hour}
        if self.web_search:
            usage["server_tool_use"] = {"web_search_requests": self.web_search}
        if "x-fake-speed" in self.h:
            usage["speed"] = self.h["x-fake-speed"]
        return usage

    async def messages(self) -> None:
        msg: dict[str, Any] = {"id": "msg_" + self.rid, "type": "message", "role": "assistant",
                               "model": self.out_model, "content": [], "stop_reason": None, "stop_sequence": None}
        if not self.stream:
            msg.update(content=[{"type": "text", "text": self.text}], stop_reason="end_turn")
            if not self.no_usage:
                msg["usage"] = self.anthropic_usage(self.completion)
            return await self.json(msg)
        if not self.no_usage:
            msg["usage"] = self.anthropic_usage(1)  # Anthropic reports one output token at the start
        delta: dict[str, Any] = {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}}
        if not self.no_usage:
            delta["usage"] = {"output_tokens": self.completion}  # cumulative, as Anthropic sends it
        events: list[Event] = [
            ("message_start", {"type": "message_start", "message": msg}),
            ("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "text", "text": ""}}),
            ("ping", {"type": "ping"}),
        ]
        events += [("content_block_delta", {"type": "content_block_delta", "index": 0,
                                            "delta": {"type": "text_delta", "text": p}}) for p in self.pieces]
        events += [("content_block_stop", {"type": "content_block_stop", "index": 0}),
                   ("message_delta", delta), ("message_stop", {"type": "message_stop"})]
        await self.sse(events)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="fake OpenAI/Anthropic-compatible upstream")
    ap.add_argument("--port", type=int, default=9000, help="TCP port on 127.0.0.1, 0 for any free one (default: 9000)")
    ap.add_argument("--default", action="append", default=[], metavar="HEADER=VALUE",
                    help="an x-fake-* header applied when a request does not send it (repeatable; default: none)")
    a = ap.parse_args(argv)
    defaults = dict(d.split("=", 1) for d in a.default)
    FakeUpstream(a.port, defaults, record=False).serve_forever()


if __name__ == "__main__":
    # Run as a script, the repo root is not on sys.path; put it there so `tests.*` imports resolve alike.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
