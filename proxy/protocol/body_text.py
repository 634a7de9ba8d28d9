"""The completion text of a whole response body, for estimating when it reports no usage
(SPEC "Usage extraction": the text actually relayed). Every reader takes untrusted JSON;
the caller catches what an odd shape raises."""

from __future__ import annotations

import contextlib
from typing import Any

import orjson


def chat_text(obj: dict[str, Any]) -> str:
    out: list[str] = []
    for c in _dicts(obj.get("choices")):
        msg = c.get("message")
        if isinstance(msg, dict):
            _strs(out, msg, ("content", "reasoning_content", "reasoning", "refusal"))
            _parts(out, msg.get("content"))
            for call in _dicts(msg.get("tool_calls")):
                _strs(out, call.get("function"), ("name", "arguments"))
            _strs(out, msg.get("function_call"), ("name", "arguments"))
        _strs(out, c, ("text",))  # legacy completions
    return "\n".join(out)


def no_text(obj: dict[str, Any]) -> str:
    return ""


def responses_body_text(obj: dict[str, Any]) -> str:
    return "\n".join(responses_text(obj))


def responses_text(resp: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for item in _dicts(resp.get("output")):
        kind = item.get("type")
        if kind == "message":
            for part in _dicts(item.get("content")):
                _strs(out, part, ("text", "refusal"))
        elif kind == "reasoning":
            for key in ("summary", "content"):
                for part in _dicts(item.get(key)):
                    _strs(out, part, ("text",))
        elif kind in ("function_call", "custom_tool_call"):
            _strs(out, item, ("name", "arguments", "input"))
    return out


def messages_text(obj: dict[str, Any]) -> str:
    out: list[str] = []
    for block in _dicts(obj.get("content")):
        _strs(out, block, ("text", "thinking"))
        if block.get("type") in ("tool_use", "server_tool_use"):
            _strs(out, block, ("name",))
            if "input" in block:
                # Nested deeper than orjson writes: lose its text, not the usage.
                with contextlib.suppress(orjson.JSONEncodeError):
                    out.append(orjson.dumps(block["input"], default=str).decode())
    return "\n".join(out)


def _dicts(v: object) -> list[dict[str, Any]]:
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def _strs(out: list[str], obj: object, keys: tuple[str, ...]) -> None:
    if isinstance(obj, dict):
        for k in keys:
            v = obj.get(k)
            if isinstance(v, str) and v:
                out.append(v)


def _parts(out: list[str], content: object) -> None:
    """Content given as a list of parts, as some servers send it."""
    for part in _dicts(content):
        _strs(out, part, ("text",))
