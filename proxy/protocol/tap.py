"""The streaming tap: reads usage out of an SSE response while the bytes pass through.

Sans-io: the relay feeds it each upstream chunk and sends on what it returns. Unless it
must drop the usage-only chunks the proxy itself asked for, it returns the very chunk it
was given. It parses JSON only where it can matter: every event until content starts,
then only events that may carry usage, metadata or the end; the text of content events
is kept raw and read only if it is ever needed (when the upstream reported no usage).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from proxy.protocol.names import CHAT_STYLE
from proxy.protocol.sse import Block, SSEReader
from proxy.protocol.usage import (
    TAP_EVENT_ERROR,
    Observed,
    Usage,
    anthropic_observed,
    loads,
    meta,
    openai_usage,
    responses_observed,
)

MAX_PENDING = 32 * 1024 * 1024  # an unfinished event this big is not SSE we can read: stop parsing
RAW_BUDGET = 8 * 1024 * 1024  # raw event data kept before it is boiled down to its text
TEXT_CAP = 4 * 1024 * 1024  # completion text kept for estimating; beyond it the estimate is short

OUTPUT_UNREPORTED = "output_unreported"

_RESP_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
_RESP_META = frozenset({"response.created", "response.in_progress"})
_RESP_DELTAS = frozenset({
    "response.output_text.delta", "response.refusal.delta", "response.reasoning_text.delta",
    "response.reasoning_summary_text.delta", "response.function_call_arguments.delta",
    "response.custom_tool_call_input.delta",
})
_TOOL_ITEMS = frozenset({"function_call", "custom_tool_call"})
_TOOL_BLOCKS = frozenset({"tool_use", "server_tool_use"})
_CHAT_DELTA_TEXT = ("content", "reasoning_content", "reasoning", "refusal")
_ANTH_DELTA_TEXT = ("text", "thinking", "partial_json")


class StreamTap:
    """One streamed response: what it reported, and the bytes the client should get."""

    __slots__ = (
        "_anth_delta", "_anth_start", "_bypass", "_chatty", "_consume", "_drop", "_extract", "_geo", "_id", "_model",
        "_raw", "_raw_size", "_reader", "_speed", "_text", "_text_size", "_tier", "_timings", "_usage",
        "content_started", "done", "endpoint", "error_seen", "events", "faults", "gave_up", "text_truncated",
    )

    def __init__(self, endpoint: str, drop_usage_only: bool) -> None:
        self.endpoint = endpoint
        self.done = False  # the terminal event was consumed
        self.content_started = False  # the first content / reasoning / tool-call event was consumed
        self.error_seen = False  # the upstream reported an error inside the stream
        self.text_truncated = False  # completion_text() stopped at TEXT_CAP
        self.gave_up = False  # not SSE we can read (an event beyond MAX_PENDING): relayed untouched
        self.faults = 0  # events whose reading failed unexpectedly; relaying goes on regardless
        self.events = False  # an event with data was seen (comments and keep-alives are not events)
        chat = endpoint in CHAT_STYLE
        self._drop = drop_usage_only and chat
        self._reader = SSEReader()
        self._bypass = False
        self._usage: Usage | None = None
        self._timings: Usage | None = None  # llama-server's own counts, used when no usage is reported
        self._model: str | None = None
        self._tier: str | None = None
        self._speed: str | None = None
        self._id: str | None = None
        self._geo: str | None = None
        self._anth_start: dict[str, Any] | None = None
        self._anth_delta: dict[str, Any] | None = None
        self._raw: list[str | bytes] = []  # data of content events (bytes: whole blocks), not parsed yet
        self._raw_size = 0
        self._text: list[str] = []
        self._text_size = 0
        consume: dict[str, Callable[[str, str], bool]] = {
            "chat": self._chat, "completions": self._chat,
            "responses": self._responses, "messages": self._messages,
        }
        extract: dict[str, Callable[[dict[str, Any], list[str]], None]] = {
            "chat": _chat_text, "completions": _chat_text,
            "responses": _responses_text, "messages": _messages_text,
        }
        self._consume = consume.get(endpoint, _ignore)
        self._extract = extract.get(endpoint, _no_text)
        self._chatty = chat

    # -- bytes in, bytes out -------------------------------------------------------------

    def feed(self, chunk: bytes) -> bytes:
        """Consume one upstream chunk; return what the client should get now."""
        if self._bypass:
            return chunk
        if self._chatty and not self._reader.pending:
            cut = _quiet_prefix(chunk)
            if cut == len(chunk):
                return self._feed_quiet(chunk)
            if cut:  # a burst: its quiet blocks, then the rest (the usage report, [DONE]) read block by block
                self._feed_quiet(chunk[:cut])
                tail = chunk[cut:]
                out = self._feed_blocks(tail)
                return chunk if out is tail else chunk[:cut] + out
        return self._feed_blocks(chunk)

    def _feed_blocks(self, chunk: bytes) -> bytes:
        held = self._reader.pending
        blocks = self._reader.feed(chunk)
        if not self._drop:
            for b in blocks:
                self._on(b)
            if self._reader.pending > MAX_PENDING:
                self._give_up()
            return chunk
        kept: list[bytes] = []
        dropped = False
        for b in blocks:
            if self._on(b):
                dropped = True
            else:
                kept.append(b.raw)
        if self._reader.pending > MAX_PENDING:
            kept.extend(b.raw for b in self._give_up())
        elif not dropped and not held and not self._reader.pending:
            return chunk  # block-aligned and nothing removed: forward the chunk itself
        return b"".join(kept)

    def _feed_quiet(self, chunk: bytes) -> bytes:
        """A chat chunk of whole blocks that reports no usage or error and does not end the
        stream: once content has started, none of its events needs reading now, nor splitting."""
        rest = chunk
        while rest and not self.content_started:  # the blocks before content are read one by one
            end = rest.find(b"\n\n") + 2
            for b in self._reader.feed(rest[:end]):
                self._on(b)  # cannot ask for a removal: only a usage report is removed
            rest = rest[end:]
        if rest and not self.text_truncated:
            self._raw.append(rest)
            self._raw_size += len(rest)
            if self._raw_size > RAW_BUDGET:
                self._boil_down()
        return chunk

    def finish(self) -> bytes:
        """At upstream EOF: whatever is still held back (an unfinished block goes as it is)."""
        if self._bypass:
            return b""
        out: list[bytes] = []
        for b in self._reader.close():
            # An unterminated block is still read (it may hold usage) but never removed.
            if not self._on(b) or not b.complete:
                out.append(b.raw)
        return b"".join(out) if self._drop else b""

    def _give_up(self) -> list[Block]:
        self.gave_up = self._bypass = True
        return self._reader.close()

    def _on(self, b: Block) -> bool:
        """Read one block; True when it is a usage-only chunk to remove."""
        if b.data is None:
            return False  # comments, keep-alives, bare blank lines
        self.events = True
        try:
            return self._consume(b.event, b.data)
        except Exception:  # metering must never break the client's stream
            self.faults += 1
            return False

    # -- dialects ------------------------------------------------------------------------

    def _chat(self, event: str, data: str) -> bool:
        if data[:1] == "[":
            if data.strip() == "[DONE]":
                self.done = True
            return False
        self._keep(data)
        if event == "error":
            self.error_seen = True
        if (self.content_started and not _reports(data, '"usage"') and not _reports(data, '"error"')
                and '"timings"' not in data):
            return False  # a content chunk: its text is read later, if ever
        obj = loads(data)
        if not isinstance(obj, dict):
            return False
        self._model = meta(obj.get("model")) or self._model
        self._id = meta(obj.get("id")) or self._id
        self._tier = meta(obj.get("service_tier")) or self._tier
        if obj.get("error") is not None or obj.get("object") == "error":
            self.error_seen = True
        u = openai_usage(obj, data)
        if u is not None:
            self._usage = u  # the last report wins; reports are never summed
        timings = obj.get("timings")
        if timings is not None:
            self._timings = Usage.from_llama_timings(timings) or self._timings
        choices = obj.get("choices")
        if not self.content_started and isinstance(choices, list) and _chat_has_content(choices):
            self.content_started = True
        return self._drop and isinstance(obj.get("usage"), dict) and isinstance(choices, list) and not choices

    def _responses(self, event: str, data: str) -> bool:
        obj: Any = None
        if not event:  # a server that sends no `event:` line: the type is in the data
            obj = loads(data)
            event = _event_type(obj)
        if event in _RESP_DELTAS:
            self._keep(data)
            if not self.content_started:
                obj = loads(data) if obj is None else obj
                if isinstance(obj, dict) and _nonempty(obj.get("delta")):
                    self.content_started = True
        elif event in _RESP_TERMINAL or event in _RESP_META:
            obj = loads(data) if obj is None else obj
            resp = obj.get("response") if isinstance(obj, dict) else None
            if isinstance(resp, dict):
                seen = responses_observed(resp, data)
                self._usage = seen.usage or self._usage
                self._model = seen.model or self._model
                self._tier = seen.service_tier or self._tier
                self._id = seen.upstream_request_id or self._id
            if event in _RESP_TERMINAL:
                self.done = True
                self.error_seen = self.error_seen or event == "response.failed"
        elif event == "response.output_item.added":
            self._keep(data)  # a tool call's name arrives here
            if not self.content_started:
                obj = loads(data) if obj is None else obj
                item = obj.get("item") if isinstance(obj, dict) else None
                if isinstance(item, dict) and item.get("type") in _TOOL_ITEMS:
                    self.content_started = True
        elif event == "error":
            self.error_seen = True
        return False

    def _messages(self, event: str, data: str) -> bool:
        obj: Any = None
        if not event:
            obj = loads(data)
            event = _event_type(obj)
        if event == "content_block_delta" or event == "content_block_start":
            self._keep(data)
            if not self.content_started:
                obj = loads(data) if obj is None else obj
                if isinstance(obj, dict) and _anthropic_has_content(obj):
                    self.content_started = True
        elif event == "message_start":
            obj = loads(data) if obj is None else obj
            msg = obj.get("message") if isinstance(obj, dict) else None
            if isinstance(msg, dict):
                seen = anthropic_observed(msg, None)
                self._model = seen.model or self._model
                self._id = seen.upstream_request_id or self._id
                self._tier = seen.service_tier or self._tier
                self._speed = seen.speed or self._speed
                self._geo = seen.inference_geo or self._geo
                u = msg.get("usage")
                if isinstance(u, dict):
                    self._anth_start = u
        elif event == "message_delta":
            obj = loads(data) if obj is None else obj
            u = obj.get("usage") if isinstance(obj, dict) else None
            if isinstance(u, dict):
                # Cumulative counts: a later delta replaces, never adds; a null says nothing.
                delta = self._anth_delta if self._anth_delta is not None else {}
                for k, v in u.items():
                    if v is not None:
                        delta[k] = _merged_split(delta.get(k), v) if k == "cache_creation" else v
                self._anth_delta = delta
                self._tier = meta(u.get("service_tier")) or self._tier
                self._speed = meta(u.get("speed")) or self._speed
                self._geo = meta(u.get("inference_geo")) or self._geo
        elif event == "message_stop":
            self.done = True
        elif event == "error":
            self.error_seen = True
        return False

    # -- what the stream told us ---------------------------------------------------------

    def observed(self) -> Observed:
        usage = (self._usage or self._timings) if self.endpoint != "messages" else self._anthropic_usage()
        return Observed(usage, self._model, self._tier, self._speed, self._id,
                        (TAP_EVENT_ERROR,) if self.faults else (), self._geo,
                        empty=not self.events and not self.gave_up)

    def _anthropic_usage(self) -> Usage | None:
        if self._anth_start is None and self._anth_delta is None:
            return None
        merged = dict(self._anth_start or {})
        for k, v in (self._anth_delta or {}).items():
            old = merged.get(k)
            # Counts are cumulative, so a later input or cache count below message_start's is a
            # placeholder (some compatible servers put 0 there); output_tokens is the last delta's.
            if k != "output_tokens" and type(v) is int and type(old) is int and v < old:
                continue
            # A TTL split is kept part by part: a later total without a 1h count keeps the earlier one.
            merged[k] = _merged_split(old, v) if k == "cache_creation" else v
        u = Usage.from_anthropic(merged)
        if u is not None and (self._anth_delta is None or "output_tokens" not in self._anth_delta):
            u.flags = (*u.flags, OUTPUT_UNREPORTED)  # only message_start's placeholder count
        return u

    def completion_text(self) -> str:
        """The streamed output so far (content, reasoning, tool calls), for estimating."""
        self._boil_down()
        return "".join(self._text)

    def _keep(self, data: str) -> None:
        if self.text_truncated:
            return
        self._raw.append(data)
        self._raw_size += len(data)
        if self._raw_size > RAW_BUDGET:
            self._boil_down()

    def _boil_down(self) -> None:
        """Turn the kept raw events into text, within TEXT_CAP."""
        raw, self._raw, self._raw_size = self._raw, [], 0
        out: list[str] = []
        for data in _event_data(raw):
            obj = loads(data)
            if isinstance(obj, dict):
                try:
                    self._extract(obj, out)
                except Exception:  # an odd shape costs its text, never the stream
                    self.faults += 1
        for piece in out:
            room = TEXT_CAP - self._text_size
            if len(piece) > room:
                self._text.append(piece[:room])
                self._text_size = TEXT_CAP
                self.text_truncated = True
                self._raw, self._raw_size = [], 0
                return
            self._text.append(piece)
            self._text_size += len(piece)


def _merged_split(old: object, new: object) -> object:
    """Anthropic's cache_creation (writes by TTL): each part from the last event that gives it."""
    if isinstance(old, dict) and isinstance(new, dict):
        return {**old, **{k: v for k, v in new.items() if v is not None}}
    return new


def _quiet_prefix(chunk: bytes) -> int:
    """How many leading bytes of a chat chunk are whole blocks in which no event can report
    usage or an error or end the stream (no CR line ends, no event names either). Inside a
    JSON string a quote is escaped, so a `"usage"` found in the bytes is a key."""
    if b"\r" in chunk or b"event:" in chunk:
        return 0
    first = len(chunk)  # where the first event that may report something is
    done = chunk.find(b"[DONE]")
    if done != -1:
        first = done
    for key in (b'"usage"', b'"error"', b'"timings"'):
        n = chunk.count(key)
        if n and n != chunk.count(key + b":null") + chunk.count(key + b": null"):
            at = chunk.find(key)
            while at != -1 and at < first:
                if not (chunk.startswith(key + b":null", at) or chunk.startswith(key + b": null", at)):
                    first = at
                    break
                at = chunk.find(key, at + 1)
    if first == len(chunk) and chunk.endswith(b"\n\n"):
        return first
    end = chunk.rfind(b"\n\n", 0, first)
    return 0 if end == -1 else end + 2


def _event_data(raw: list[str | bytes]) -> Iterator[str]:
    """The data of kept events, in order; kept blocks are split again here, when text is needed."""
    for entry in raw:
        if isinstance(entry, str):
            yield entry
            continue
        for b in SSEReader().feed(entry):
            if b.data is not None and b.data[:1] != "[":  # as _chat keeps them
                yield b.data


def _ignore(event: str, data: str) -> bool:
    return False


def _no_text(obj: dict[str, Any], out: list[str]) -> None:
    return None


def _event_type(obj: object) -> str:
    """The `type` of an event's data, for servers that send no `event:` line."""
    t = obj.get("type") if isinstance(obj, dict) else None
    return t if isinstance(t, str) else ""


def _reports(data: str, key: str) -> bool:
    """Whether the quoted `key` occurs with a value other than null, without parsing the JSON.

    With include_usage on, OpenAI sends `"usage": null` in every chunk: those need no parse.
    Anything unusual after the key (odd spacing, a string value) counts as a report: a needless
    parse costs time, a missed one would cost the usage.
    """
    i = data.find(key)
    while i != -1:
        j = i + len(key)
        if not "".join(data[j:j + 16].split()).startswith(":null"):
            return True
        i = data.find(key, j)
    return False


def _nonempty(v: object) -> bool:
    return isinstance(v, str) and v != ""


def _chat_has_content(choices: list[Any]) -> bool:
    for c in choices:
        if not isinstance(c, dict):
            continue
        if _nonempty(c.get("text")):
            return True
        d = c.get("delta")
        if isinstance(d, dict):
            if any(_nonempty(d.get(k)) for k in _CHAT_DELTA_TEXT):
                return True
            if d.get("tool_calls") or isinstance(d.get("function_call"), dict):
                return True
    return False


def _anthropic_has_content(obj: dict[str, Any]) -> bool:
    d = obj.get("delta")
    if isinstance(d, dict) and any(_nonempty(d.get(k)) for k in _ANTH_DELTA_TEXT):
        return True
    cb = obj.get("content_block")
    return isinstance(cb, dict) and (cb.get("type") in _TOOL_BLOCKS or _nonempty(cb.get("text")))


def _add(out: list[str], obj: object, keys: tuple[str, ...]) -> None:
    if isinstance(obj, dict):
        for k in keys:
            v = obj.get(k)
            if isinstance(v, str) and v:
                out.append(v)


def _chat_text(obj: dict[str, Any], out: list[str]) -> None:
    choices = obj.get("choices")
    if not isinstance(choices, list):
        return
    for c in choices:
        if not isinstance(c, dict):
            continue
        _add(out, c, ("text",))  # legacy completions
        d = c.get("delta")
        if isinstance(d, dict):
            _add(out, d, _CHAT_DELTA_TEXT)
            calls = d.get("tool_calls")
            if isinstance(calls, list):
                for call in calls:
                    if isinstance(call, dict):
                        _add(out, call.get("function"), ("name", "arguments"))
            _add(out, d.get("function_call"), ("name", "arguments"))


def _responses_text(obj: dict[str, Any], out: list[str]) -> None:
    _add(out, obj, ("delta",))
    item = obj.get("item")
    if isinstance(item, dict) and item.get("type") in _TOOL_ITEMS:
        _add(out, item, ("name",))


def _messages_text(obj: dict[str, Any], out: list[str]) -> None:
    _add(out, obj.get("delta"), _ANTH_DELTA_TEXT)
    cb = obj.get("content_block")
    if isinstance(cb, dict):
        _add(out, cb, ("text", "thinking"))
        if cb.get("type") in _TOOL_BLOCKS:
            _add(out, cb, ("name",))
