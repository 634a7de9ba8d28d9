"""What a request puts in front of the model, per API dialect, read lazily for counting.

Message overhead follows OpenAI's cookbook recipe ("How to count tokens with tiktoken"):
3 tokens per message, 1 more per `name`, 3 to prime the reply.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass

from proxy.metering.estimate.steps import Steps

PARTS_PER_SLICE = 64  # a prompt of many short messages still pauses for the event loop
PIECES_PER_SLICE = 4096  # pieces of a definition's JSON text rendered between pauses
# The cookbook's constants for gpt-3.5-turbo-0125, gpt-4, gpt-4o and later.
TOKENS_PER_MESSAGE = 3  # <|start|>{role}<|message|>{content}<|end|>
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3  # every reply is primed with <|start|>assistant<|message|>


@dataclass(frozen=True, slots=True)
class Json:
    """A definition (tools, a tool call's input) counted as its JSON text, rendered when counted."""

    value: object


@dataclass(slots=True)
class Message:
    texts: list[str | Json]  # role included
    named: bool = False  # carries a `name`


# What a request puts in front of the model, read lazily (a 32 MB body may hold a million
# messages): a text counted bare (raw prompts), a definition, a number of tokens given as
# ids (completions and embeddings accept them), or a message.
Part = str | Json | int | Message


def total(parts: Iterable[Part], count: Callable[[str], Steps]) -> Steps:
    n = messages = 0
    for i, part in enumerate(parts, 1):
        if isinstance(part, int):
            n += part
        elif isinstance(part, Message):
            messages += 1
            n += TOKENS_PER_MESSAGE + TOKENS_PER_NAME * part.named
            for t in part.texts:
                n += yield from count((yield from render(t)) if isinstance(t, Json) else t)
        else:
            n += yield from count((yield from render(part)) if isinstance(part, Json) else part)
        if i % PARTS_PER_SLICE == 0:
            yield
    return n + REPLY_PRIMING if messages else n


# json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str) renders the same text
# in one C call that holds the GIL to its end (seconds, for 30 MB of tools). iterencode without
# one-shot uses the encoder's Python version, which yields piece by piece: the count pauses.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str)


def render(definition: Json) -> Generator[None, None, str]:
    """A definition's JSON text (approximately how it is rendered to the model), pausing
    every PIECES_PER_SLICE pieces; "" for one that cannot be rendered."""
    if definition.value is None:
        return ""
    pieces: list[str] = []
    try:
        for i, piece in enumerate(_ENCODER.iterencode(definition.value), 1):
            pieces.append(piece)
            if i % PIECES_PER_SLICE == 0:
                yield
    except (ValueError, TypeError, RecursionError):
        return ""
    return "".join(pieces)


def _items(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _strs(*values: object) -> Iterator[str]:
    return (v for v in values if isinstance(v, str) and v)


def _as_json(value: object) -> Iterator[Json]:
    """A definition counted as its JSON text: an approximation of how it is rendered."""
    return iter(()) if value is None else iter((Json(value),))


def _field(obj: object, key: str) -> object:
    return obj.get(key) if isinstance(obj, Mapping) else None


def _parts(content: object, kinds: frozenset[str]) -> Iterator[str]:
    """Text of a content string or of its text parts."""
    if isinstance(content, str):
        yield from _strs(content)
        return
    for part in _items(content):
        if isinstance(part, str):
            yield from _strs(part)
        elif isinstance(part, Mapping):
            kind = part.get("type")
            if kind in kinds:
                yield from _strs(part.get("text"))
            elif kind == "refusal":
                yield from _strs(part.get("refusal"))
            # Images, audio and files count nothing: their tokens depend on pixels and
            # duration the proxy does not decode, so the estimate is low for them.


_OPENAI_TEXT = frozenset({"text", "input_text", "output_text"})


def _chat(req: Mapping[str, object]) -> Iterator[Part]:
    for m in _items(req.get("messages")):
        if not isinstance(m, Mapping):
            continue
        message = Message([])
        # The recipe encodes every string value of a message (role, content, name, ...).
        for key, value in m.items():
            if key == "content":
                message.texts.extend(_parts(value, _OPENAI_TEXT))
            elif key == "tool_calls":
                for call in _items(value):
                    fn = _field(call, "function")
                    message.texts.extend(_strs(_field(fn, "name"), _field(fn, "arguments")))
            elif key == "function_call":
                message.texts.extend(_strs(_field(value, "name"), _field(value, "arguments")))
            elif isinstance(value, str):
                message.texts.extend(_strs(value))
                message.named |= key == "name"
        yield message
    yield from _as_json(req.get("tools"))
    yield from _as_json(req.get("functions"))


def _raw_inputs(value: object) -> Iterator[Part]:
    """`prompt` / `input`: a string, strings, token ids, or lists of token ids."""
    if isinstance(value, str):
        yield from _strs(value)
        return
    for item in _items(value):
        if isinstance(item, str):
            yield from _strs(item)
        elif _is_token(item):
            yield 1
        elif isinstance(item, list):
            yield sum(1 for t in item if _is_token(t))


def _is_token(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _completions(req: Mapping[str, object]) -> Iterator[Part]:
    yield from _raw_inputs(req.get("prompt"))
    yield from _strs(req.get("suffix"))


def _embeddings(req: Mapping[str, object]) -> Iterator[Part]:
    return _raw_inputs(req.get("input"))


def _responses(req: Mapping[str, object]) -> Iterator[Part]:
    # The Responses API renders its items as chat messages, so the chat recipe applies.
    if texts := list(_strs(req.get("instructions"))):
        yield Message(["system", *texts])
    items = req.get("input")
    if isinstance(items, str):
        yield Message(["user", *_strs(items)])
    for item in _items(items):
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type")
        if kind in (None, "message"):
            yield Message([*_strs(item.get("role")), *_parts(item.get("content"), _OPENAI_TEXT)])
        elif kind == "function_call":
            yield Message(list(_strs(item.get("name"), item.get("arguments"))))
        elif kind == "function_call_output":
            yield Message(list(_parts(item.get("output"), _OPENAI_TEXT)))
        # Reasoning items and built-in tool calls are left out: their billing is the server's.
    yield from _as_json(req.get("tools"))


def _anthropic_blocks(content: object) -> Iterator[str | Json]:
    if isinstance(content, str):
        yield from _strs(content)
        return
    for block in _items(content):
        kind = _field(block, "type")
        if kind == "text":
            yield from _strs(_field(block, "text"))
        elif kind == "tool_use":
            yield from _strs(_field(block, "name"))
            yield from _as_json(_field(block, "input"))
        elif kind == "tool_result":
            # Its content is a string or text/image blocks; not recursed, so nesting cannot blow the stack.
            result = _field(block, "content")
            yield from _strs(result)
            yield from (t for b in _items(result) if _field(b, "type") == "text" for t in _strs(_field(b, "text")))
        # Images and documents count nothing (as in chat); earlier turns' thinking is
        # dropped from context by Anthropic, so replayed thinking blocks are not counted.


def _messages(req: Mapping[str, object]) -> Iterator[Part]:
    # An approximation: Claude's tokenizer and framing are unpublished, so OpenAI's
    # recipe and the configured tiktoken encoding stand in for them.
    if system := list(_anthropic_blocks(req.get("system"))):
        yield Message(["system", *system])
    for m in _items(req.get("messages")):
        if isinstance(m, Mapping):
            yield Message([*_strs(m.get("role")), *_anthropic_blocks(m.get("content"))])
    yield from _as_json(req.get("tools"))


READERS: Mapping[str, Callable[[Mapping[str, object]], Iterator[Part]]] = {
    "chat": _chat, "completions": _completions, "embeddings": _embeddings,
    "responses": _responses, "messages": _messages,
}

