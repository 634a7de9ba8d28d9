"""A real HTTP upstream serving batch jobs as OpenAI and Anthropic do, for the batch tests.

OpenAI: POST /v1/batches (naming no output file yet, as a new batch does), GET /v1/batches (every
batch created here, as an account every tenant shares lists them), GET /v1/batches/{id} (a batch
naming its output_file_id `file-{id}`), POST /v1/files
(a multipart upload), GET /v1/files/{id} (the file object: `purpose` as uploaded, `batch_output`
for a file a test put in `files` itself, unless `purposes` says otherwise) and
GET /v1/files/{id}/content.
Anthropic: GET/POST /v1/messages/batches, GET /v1/messages/batches/{id} (naming its results_url
on this server's own address, as Anthropic names api.anthropic.com), POST …/{id}/cancel,
GET …/{id}/results. A file or results body is given whole (bytes) or as a function
returning its chunks, so a large one is made as it is sent.
"""

from __future__ import annotations

import email.parser
import gzip
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

import orjson
import uvicorn

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Body = bytes | Callable[[], Iterable[bytes]]
CREATED_AT = "2026-06-01T10:00:00.000000+00:00"


class BatchUpstream:
    def __init__(self) -> None:
        self.files: dict[str, Body] = {}
        self.results: dict[str, Body] = {}
        self.batches: list[str] = []  # ids of the batches POST /v1/batches created, in order
        self.purposes: dict[str, str] = {}  # file id -> purpose; a file in `files` without one: batch_output
        self.file_objects = True  # False: GET /v1/files/{id} is 404, as on servers without file objects
        self.gzip = False  # compress file content although identity was asked for
        self.requests: list[dict[str, Any]] = []
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> BatchUpstream:
        config = uvicorn.Config(self.app, host="127.0.0.1", port=0, log_level="warning", lifespan="off",
                                access_log=False, interface="asgi3")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("batch upstream did not start")
            time.sleep(0.005)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=5)

    def batch(self, batch_id: str) -> dict[str, Any]:
        return {"id": batch_id, "object": "batch", "endpoint": "/v1/chat/completions", "errors": None,
                "input_file_id": "file-in", "completion_window": "24h", "status": "completed",
                "output_file_id": "file-" + batch_id, "error_file_id": None, "created_at": 1780000000,
                "request_counts": {"total": 3, "completed": 3, "failed": 0}, "metadata": None}

    def message_batch(self, batch_id: str, ended: bool = True) -> dict[str, Any]:
        return {"id": batch_id, "type": "message_batch", "processing_status": "ended" if ended else "in_progress",
                "request_counts": {"processing": 0, "succeeded": 2, "errored": 1, "canceled": 0, "expired": 0},
                "ended_at": CREATED_AT if ended else None, "created_at": CREATED_AT,
                "expires_at": "2026-06-02T10:00:00.000000+00:00", "archived_at": None,
                "cancel_initiated_at": None,
                "results_url": f"{self.url}/v1/messages/batches/{batch_id}/results" if ended else None}

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = bytearray()
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        method, path = scope["method"], scope["path"]
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        self.requests.append({"method": method, "path": path, "headers": headers})
        parts = path.strip("/").split("/")
        if parts[:2] == ["v1", "files"] and len(parts) == 4 and parts[3] == "content" and parts[2] in self.files:
            return await self.stream(send, self.files[parts[2]], b"application/octet-stream")
        if parts == ["v1", "files"] and method == "POST":
            return await self.json(send, self.upload(headers.get("content-type", ""), bytes(body)))
        if parts[:2] == ["v1", "files"] and len(parts) == 3 and parts[2] in self.files and self.file_objects:
            return await self.json(send, self.file_object(parts[2]))
        if parts == ["v1", "batches"] and method == "POST":
            request = orjson.loads(body)
            batch_id = "batch_new" + (str(len(self.batches)) if self.batches else "")
            self.batches.append(batch_id)
            return await self.json(send, {
                "id": batch_id, "object": "batch", "endpoint": request["endpoint"], "errors": None,
                "input_file_id": request["input_file_id"], "completion_window": "24h", "status": "validating",
                "output_file_id": None, "error_file_id": None, "created_at": 1780000000,
                "request_counts": {"total": 0, "completed": 0, "failed": 0}, "metadata": None})
        if parts == ["v1", "batches"]:
            return await self.json(send, {"object": "list", "data": [self.batch(b) for b in self.batches],
                                          "has_more": False})
        if parts[:2] == ["v1", "batches"] and len(parts) == 3:
            return await self.json(send, self.batch(parts[2]))
        if parts[:3] == ["v1", "messages", "batches"]:
            if len(parts) == 3 and method == "POST":
                return await self.json(send, self.message_batch("msgbatch_new", ended=False))
            if len(parts) == 3:
                return await self.json(send, {"data": [self.message_batch(b) for b in self.results],
                                              "has_more": False, "first_id": None, "last_id": None})
            if len(parts) == 4:
                return await self.json(send, self.message_batch(parts[3]))
            if len(parts) == 5 and parts[4] == "cancel" and method == "POST":
                return await self.json(send, self.message_batch(parts[3]))
            if len(parts) == 5 and parts[4] == "results" and parts[3] in self.results:
                return await self.stream(send, self.results[parts[3]], b"application/binary")
        await self.json(send, {"error": {"message": f"no {method} {path}"}}, 404)

    def upload(self, content_type: str, body: bytes) -> dict[str, Any]:
        """A multipart upload (`file`, `purpose`), kept as a file of its own."""
        message = email.parser.BytesParser().parsebytes(b"content-type: " + content_type.encode() + b"\r\n\r\n" + body)
        fields = {}
        for part in message.get_payload():
            fields[part.get_param("name", header="content-disposition")] = part.get_payload(decode=True)
        file_id = f"file-upload{len(self.files)}"
        self.files[file_id] = fields["file"]
        self.purposes[file_id] = fields["purpose"].decode()
        return self.file_object(file_id)

    def file_object(self, file_id: str) -> dict[str, Any]:
        content = self.files[file_id]
        return {"id": file_id, "object": "file", "bytes": len(content) if isinstance(content, bytes) else 0,
                "created_at": 1780000000, "filename": file_id + ".jsonl",
                "purpose": self.purposes.get(file_id, "batch_output"), "status": "processed"}

    async def json(self, send: Send, obj: Any, status: int = 200) -> None:
        body = orjson.dumps(obj)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"request-id", b"req_fake")]})
        await send({"type": "http.response.body", "body": body})

    async def stream(self, send: Send, body: Body, ctype: bytes) -> None:
        headers = [(b"content-type", ctype)]
        if isinstance(body, bytes):
            data = gzip.compress(body) if self.gzip else body
            if self.gzip:
                headers.append((b"content-encoding", b"gzip"))
            headers.append((b"content-length", str(len(data)).encode()))
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": data})
            return
        await send({"type": "http.response.start", "status": 200, "headers": headers})  # chunked
        for chunk in body():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
