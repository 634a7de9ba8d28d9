"""A small real HTTP server speaking the providers' wire formats, for tests and benchmarks.

It answers OpenAI Chat Completions, legacy Completions, Embeddings, the Responses API,
Anthropic Messages and /v1/models, streamed and not, with the usage shape of the
dialect its model name implies: `gpt-*` OpenAI, `kimi-*` Moonshot, `deepseek-*`
DeepSeek, anything else vLLM/llama.cpp. As OpenAI does, a chat or completions stream
carries a usage chunk only when the request asked for `stream_options.include_usage`.

Request headers steer it (all optional):
  x-fake-usage       JSON {"prompt", "cached", "cache_write", "completion", "reasoning"};
                     "prompt" is the whole prompt, cached and cache-write tokens included
                     (for Anthropic, input_tokens = prompt - cached - cache_write)
  x-fake-chunks      content deltas in a stream (default 4)
  x-fake-delay-ms    pause between stream events, and before a plain reply
  x-fake-status      reply with this HTTP status and the dialect's error body
  x-fake-reset-after abort the connection after this many stream events
  x-fake-hang        park before the response headers until release()
  x-fake-hold        send headers and the first event, then park until release()
  x-fake-no-usage    report no usage at all
  x-fake-usage-in-choice  usage on the chunk that still has choices (plain: inside choices[0])
  x-fake-service-tier / x-fake-speed / x-fake-model   echoed in the response
  x-fake-gzip        gzip a plain body even though identity was asked for

Run standalone (for bench/relay.py): python tests/fake_upstream.py --port 9000
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import itertools
import json
import sys
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import uvicorn

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
MODELS = ("kimi-k3.1-pro", "gpt-test", "deepseek-test", "llama-test")


class _Reset(Exception):
    """Raised after the response started: uvicorn then drops the connection mid-body."""


class FakeUpstream:
    def __init__(self, port: int = 0) -> None:
        self.port = port
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self._ids = itertools.count(1)
        self._released = threading.Event()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> FakeUpstream:
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning",
                                lifespan="off", access_log=False, interface="asgi3")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("fake upstream did not start")
            time.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        self._released.set()
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=5)

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
        """Let every parked (x-fake-hang / x-fake-hold) request go on."""
        self._released.set()

    # -- ASGI ------------------------------------------------------------------
    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = bytearray()
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        self.requests.append({"method": scope["method"], "path": scope["path"],
                              "query": scope.get("query_string", b"").decode(), "headers": headers,
                              "json": parsed, "body": bytes(body)})
        self.in_flight += 1
        try:
            await _Exchange(self, scope, headers, parsed, send, f"req_{next(self._ids):06d}").run()
        finally:
            self.in_flight -= 1

    async def park(self) -> None:
        while not self._released.is_set():
            await asyncio.sleep(0.01)


class _Exchange:
    def __init__(self, fake: FakeUpstream, scope: Scope, headers: dict[str, str], req: Any, send: Send,
                 request_id: str) -> None:
        self.fake, self.scope, self.h, self.send, self.rid = fake, scope, headers, send, request_id
        self.req: dict[str, Any] = req if isinstance(req, dict) else {}
        self.path: str = scope["path"]
        self.model = str(self.req.get("model") or "unknown")
        self.anthropic = self.path == "/v1/messages"
        self.chunks = int(headers.get("x-fake-chunks", "4"))
        self.delay = int(headers.get("x-fake-delay-ms", "0")) / 1000
        self.pieces = [f"tok{i} " for i in range(self.chunks)]
        self.text = "".join(self.pieces)
        given = json.loads(headers["x-fake-usage"]) if "x-fake-usage" in headers else {}
        self.u = {"prompt": given.get("prompt", 10 + len(json.dumps(self.req)) // 8),
                  "cached": given.get("cached", 0), "cache_write": given.get("cache_write"),
                  "completion": given.get("completion", self.chunks), "reasoning": given.get("reasoning")}
        self.no_usage = "x-fake-no-usage" in headers
        self.events_sent = 0

    async def run(self) -> None:
        if "x-fake-hang" in self.h:
            await self.fake.park()
        if "x-fake-status" in self.h:
            return await self.error(int(self.h["x-fake-status"]))
        route = {"/v1/chat/completions": self.chat, "/v1/completions": self.completions,
                 "/v1/embeddings": self.embeddings, "/v1/responses": self.responses,
                 "/v1/messages": self.messages}.get(self.path)
        if self.path == "/v1/models" and self.scope["method"] == "GET":
            return await self.models()
        if route is None or self.scope["method"] != "POST":
            return await self.error(404, f"no route {self.scope['method']} {self.path}")
        if self.delay and not self.req.get("stream"):
            await asyncio.sleep(self.delay)
        await route()

    # -- plumbing --------------------------------------------------------------
    async def start(self, status: int, ctype: str, extra: list[tuple[bytes, bytes]] | None = None) -> None:
        await self.send({"type": "http.response.start", "status": status,
                         "headers": [(b"content-type", ctype.encode()), (b"x-request-id", self.rid.encode()),
                                     (b"openai-processing-ms", b"7"),
                                     *(extra or [])]})

    async def json(self, obj: Any, status: int = 200, extra: list[tuple[bytes, bytes]] | None = None) -> None:
        body = json.dumps(obj).encode()
        headers = list(extra or [])
        if "x-fake-gzip" in self.h or (self.path == "/v1/models" and "gzip" in self.h.get("accept-encoding", "")):
            body = gzip.compress(body)
            headers.append((b"content-encoding", b"gzip"))
        headers.append((b"content-length", str(len(body)).encode()))
        await self.start(status, "application/json", headers)
        await self.send({"type": "http.response.body", "body": body})

    async def stream(self, events: list[tuple[str | None, Any]]) -> None:
        await self.start(200, "text/event-stream; charset=utf-8", [(b"cache-control", b"no-cache")])
        reset_after = int(self.h.get("x-fake-reset-after", "-1"))
        for i, (name, data) in enumerate(events):
            if i == reset_after:
                raise _Reset("x-fake-reset-after")
            payload = data if isinstance(data, str) else json.dumps(data)
            frame = (f"event: {name}\n" if name else "") + f"data: {payload}\n\n"
            await self.send({"type": "http.response.body", "body": frame.encode(), "more_body": True})
            if i == 0 and "x-fake-hold" in self.h:
                await self.fake.park()
            elif self.delay:
                await asyncio.sleep(self.delay)
        await self.send({"type": "http.response.body", "body": b""})

    async def error(self, status: int, message: str | None = None) -> None:
        message = message or f"fake error {status}"
        if self.anthropic:
            kind = {429: "rate_limit_error", 404: "not_found_error"}.get(status, "api_error")
            return await self.json({"type": "error", "error": {"type": kind, "message": message}}, status)
        if status == 429:
            err = {"message": message, "type": "requests", "code": "rate_limit_exceeded"}
        elif status >= 500:
            err = {"message": message, "type": "server_error", "code": None}
        else:
            err = {"message": message, "type": "invalid_request_error", "code": "not_found" if status == 404 else None}
        extra = [(b"retry-after", b"1")] if status == 429 else []
        await self.json({"error": err}, status, extra)

    # -- usage per dialect -----------------------------------------------------
    def openai_usage(self) -> dict[str, Any]:
        u = self.u
        usage: dict[str, Any] = {"prompt_tokens": u["prompt"], "completion_tokens": u["completion"],
                                 "total_tokens": u["prompt"] + u["completion"]}
        if self.model.startswith("gpt-"):
            details: dict[str, int] = {"cached_tokens": u["cached"]}
            if u["cache_write"] is not None:
                details["cache_write_tokens"] = u["cache_write"]
            usage["prompt_tokens_details"] = details
            usage["completion_tokens_details"] = {"reasoning_tokens": u["reasoning"] or 0}
        elif self.model.startswith("kimi-"):
            if u["cached"]:
                usage["cached_tokens"] = u["cached"]
        elif self.model.startswith("deepseek-"):
            usage["prompt_cache_hit_tokens"] = u["cached"]
            usage["prompt_cache_miss_tokens"] = u["prompt"] - u["cached"]
            if u["reasoning"] is not None:
                usage["completion_tokens_details"] = {"reasoning_tokens": u["reasoning"]}
        return usage

    def base(self, obj: str) -> dict[str, Any]:
        out: dict[str, Any] = {"id": f"chatcmpl-{self.rid}", "object": obj, "created": int(time.time()),
                               "model": self.h.get("x-fake-model", self.model)}
        if "x-fake-service-tier" in self.h:
            out["service_tier"] = self.h["x-fake-service-tier"]
        if self.model.startswith(("llama", "smollm2")):
            out["system_fingerprint"] = "b6000-fake"
        return out

    # -- routes ----------------------------------------------------------------
    async def models(self) -> None:
        await self.json({"object": "list", "data": [{"id": m, "object": "model", "created": 1761177600,
                                                      "owned_by": "fake"} for m in MODELS]})

    async def chat(self) -> None:
        in_choice = "x-fake-usage-in-choice" in self.h
        if not self.req.get("stream"):
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": self.text},
                                      "finish_reason": "stop", "logprobs": None}
            body = {**self.base("chat.completion"), "choices": [choice]}
            if not self.no_usage:
                if in_choice:
                    choice["usage"] = self.openai_usage()
                else:
                    body["usage"] = self.openai_usage()
            return await self.json(body)
        want_usage = (self.req.get("stream_options") or {}).get("include_usage") is True and not self.no_usage
        head = self.base("chat.completion.chunk")

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            c = {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}
            if want_usage:
                c["usage"] = None
            return c

        events: list[tuple[str | None, Any]] = [(None, chunk({"role": "assistant", "content": ""}))]
        events += [(None, chunk({"content": p})) for p in self.pieces]
        last = chunk({}, "stop")
        if in_choice and not self.no_usage:
            last["usage"] = self.openai_usage()
        events.append((None, last))
        if want_usage and not in_choice:
            events.append((None, {**head, "choices": [], "usage": self.openai_usage()}))
        events.append((None, "[DONE]"))
        await self.stream(events)

    async def completions(self) -> None:
        head = {**self.base("text_completion"), "id": f"cmpl-{self.rid}"}
        if not self.req.get("stream"):
            body = {**head, "choices": [{"index": 0, "text": self.text, "finish_reason": "stop", "logprobs": None}]}
            if not self.no_usage:
                body["usage"] = self.openai_usage()
            return await self.json(body)
        want_usage = (self.req.get("stream_options") or {}).get("include_usage") is True and not self.no_usage
        events: list[tuple[str | None, Any]] = [
            (None, {**head, "choices": [{"index": 0, "text": p, "finish_reason": None, "logprobs": None}]})
            for p in self.pieces]
        events.append((None, {**head, "choices": [{"index": 0, "text": "", "finish_reason": "stop",
                                                   "logprobs": None}]}))
        if want_usage:
            events.append((None, {**head, "choices": [], "usage": self.openai_usage()}))
        events.append((None, "[DONE]"))
        await self.stream(events)

    async def embeddings(self) -> None:
        inputs = self.req.get("input")
        items = inputs if isinstance(inputs, list) else [inputs]
        body: dict[str, Any] = {"object": "list", "model": self.model, "data": [
            {"object": "embedding", "index": i, "embedding": [0.125, -0.5, 0.25]} for i in range(len(items))]}
        if not self.no_usage:
            body["usage"] = {"prompt_tokens": self.u["prompt"], "total_tokens": self.u["prompt"]}
        await self.json(body)

    def response(self, status: str, text: str) -> dict[str, Any]:
        u = self.u
        out: dict[str, Any] = {
            "id": f"resp_{self.rid}", "object": "response", "created_at": int(time.time()), "status": status,
            "model": self.h.get("x-fake-model", self.model), "output": [], "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [], "error": None, "incomplete_details": None,
            "instructions": None, "metadata": {}, "temperature": 1.0, "top_p": 1.0, "usage": None,
        }
        if "x-fake-service-tier" in self.h:
            out["service_tier"] = self.h["x-fake-service-tier"]
        if text or status == "completed":
            out["output"] = [{"type": "message", "id": f"msg_{self.rid}", "status": "completed", "role": "assistant",
                              "content": [{"type": "output_text", "text": text, "annotations": []}]}]
        if status == "completed" and not self.no_usage:
            details: dict[str, int] = {"cached_tokens": u["cached"]}
            if u["cache_write"] is not None:
                details["cache_write_tokens"] = u["cache_write"]
            out["usage"] = {"input_tokens": u["prompt"], "input_tokens_details": details,
                            "output_tokens": u["completion"],
                            "output_tokens_details": {"reasoning_tokens": u["reasoning"] or 0},
                            "total_tokens": u["prompt"] + u["completion"]}
        return out

    async def responses(self) -> None:
        if not self.req.get("stream"):
            return await self.json(self.response("completed", self.text))
        seq = itertools.count()
        item = {"type": "message", "id": f"msg_{self.rid}", "status": "in_progress", "role": "assistant",
                "content": []}
        part = {"type": "output_text", "text": "", "annotations": []}
        where = {"item_id": item["id"], "output_index": 0, "content_index": 0}

        def ev(kind: str, **fields: Any) -> tuple[str, dict[str, Any]]:
            return kind, {"type": kind, "sequence_number": next(seq), **fields}

        events = [ev("response.created", response=self.response("in_progress", "")),
                  ev("response.in_progress", response=self.response("in_progress", "")),
                  ev("response.output_item.added", output_index=0, item=item),
                  ev("response.content_part.added", part=part, **where)]
        events += [ev("response.output_text.delta", delta=p, logprobs=[], **where) for p in self.pieces]
        done_part = {**part, "text": self.text}
        events += [ev("response.output_text.done", text=self.text, logprobs=[], **where),
                   ev("response.content_part.done", part=done_part, **where),
                   ev("response.output_item.done", output_index=0,
                      item={**item, "status": "completed", "content": [done_part]}),
                   ev("response.completed", response=self.response("completed", self.text))]
        await self.stream(list(events))

    def anthropic_usage(self, output: int) -> dict[str, Any]:
        u = self.u
        cw = u["cache_write"] or 0
        usage: dict[str, Any] = {"input_tokens": max(0, u["prompt"] - u["cached"] - cw),
                                 "cache_read_input_tokens": u["cached"], "cache_creation_input_tokens": cw,
                                 "output_tokens": output, "service_tier": self.h.get("x-fake-service-tier",
                                                                                    "standard")}
        if "x-fake-speed" in self.h:
            usage["speed"] = self.h["x-fake-speed"]
        return usage

    async def messages(self) -> None:
        msg: dict[str, Any] = {"id": f"msg_{self.rid}", "type": "message", "role": "assistant",
                               "model": self.h.get("x-fake-model", self.model), "content": [],
                               "stop_reason": None, "stop_sequence": None}
        if not self.req.get("stream"):
            msg.update(content=[{"type": "text", "text": self.text}], stop_reason="end_turn")
            if not self.no_usage:
                msg["usage"] = self.anthropic_usage(self.u["completion"])
            return await self.json(msg)
        start = {**msg, "usage": self.anthropic_usage(1) if not self.no_usage else {"output_tokens": 0}}
        events: list[tuple[str | None, Any]] = [
            ("message_start", {"type": "message_start", "message": start}),
            ("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "text", "text": ""}}),
            ("ping", {"type": "ping"}),
        ]
        events += [("content_block_delta", {"type": "content_block_delta", "index": 0,
                                            "delta": {"type": "text_delta", "text": p}}) for p in self.pieces]
        delta: dict[str, Any] = {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}}
        delta["usage"] = {"output_tokens": 0 if self.no_usage else self.u["completion"]}
        events += [("content_block_stop", {"type": "content_block_stop", "index": 0}),
                   ("message_delta", delta), ("message_stop", {"type": "message_stop"})]
        await self.stream(events)


def main() -> None:
    ap = argparse.ArgumentParser(description="fake OpenAI/Anthropic-compatible upstream")
    ap.add_argument("--port", type=int, default=9000)
    port = ap.parse_args().port
    fake = FakeUpstream(port)
    uvicorn.run(fake.app, host="127.0.0.1", port=port, log_level="warning", lifespan="off",
                access_log=False, loop="uvloop", http="httptools", interface="asgi3")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
