"""Batch result lines in the providers' wire formats, for the batch tests.

Shapes as the providers document them (SPEC "Batch jobs"): an OpenAI batch output line is
{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}, an
Anthropic message-batch result {"custom_id", "result": {"type", "message" | "error"}}.
"""

from __future__ import annotations

from typing import Any

import orjson

CREATED = 1_780_000_000  # 2026-05-28T20:26:40Z: inside the test price tables' entries


def openai_chat(custom_id: str, prompt: int, completion: int, cached: int = 0, created: int | None = CREATED,
                model: str = "gpt-test", service_tier: str | None = "default") -> bytes:
    body: dict[str, Any] = {
        "id": "chatcmpl-" + custom_id, "object": "chat.completion", "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "4", "refusal": None},
                     "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                  "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
                  "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
        "system_fingerprint": "fp_f33667828e",
    }
    if created is not None:
        body["created"] = created
    if service_tier is not None:
        body["service_tier"] = service_tier
    line = {"id": "batch_req_" + custom_id, "custom_id": custom_id,
            "response": {"status_code": 200, "request_id": "req_" + custom_id, "body": body}, "error": None}
    return orjson.dumps(line)


def openai_embedding(custom_id: str, prompt: int, model: str = "text-embedding-test") -> bytes:
    body = {"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.5, -0.25]}],
            "model": model, "usage": {"prompt_tokens": prompt, "total_tokens": prompt}}
    return orjson.dumps({"id": "batch_req_" + custom_id, "custom_id": custom_id,
                         "response": {"status_code": 200, "request_id": "req_" + custom_id, "body": body},
                         "error": None})


def openai_responses(custom_id: str, inp: int, out: int, created_at: int = CREATED) -> bytes:
    body = {"id": "resp_" + custom_id, "object": "response", "created_at": created_at, "status": "completed",
            "model": "gpt-test", "output": [{"type": "message", "id": "msg_1", "status": "completed",
                                             "role": "assistant",
                                             "content": [{"type": "output_text", "text": "hi", "annotations": []}]}],
            "usage": {"input_tokens": inp, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": out,
                      "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": inp + out}}
    return orjson.dumps({"id": "batch_req_" + custom_id, "custom_id": custom_id,
                         "response": {"status_code": 200, "request_id": "req_" + custom_id, "body": body},
                         "error": None})


def openai_failed(custom_id: str) -> bytes:
    """A request that failed: an error body, no usage (bills nothing)."""
    body = {"error": {"message": "Invalid model", "type": "invalid_request_error", "param": None, "code": None}}
    return orjson.dumps({"id": "batch_req_" + custom_id, "custom_id": custom_id,
                         "response": {"status_code": 400, "request_id": "req_" + custom_id, "body": body},
                         "error": None})


def anthropic_succeeded(custom_id: str, inp: int, out: int, cache_read: int = 0, cache_write: int = 0,
                        model: str = "claude-test") -> bytes:
    message = {"id": "msg_" + custom_id, "type": "message", "role": "assistant", "model": model,
               "content": [{"type": "text", "text": "Hello!"}], "stop_reason": "end_turn", "stop_sequence": None,
               "usage": {"input_tokens": inp, "cache_creation_input_tokens": cache_write,
                         "cache_read_input_tokens": cache_read, "output_tokens": out, "service_tier": "batch"}}
    return orjson.dumps({"custom_id": custom_id, "result": {"type": "succeeded", "message": message}})


def anthropic_errored(custom_id: str) -> bytes:
    return orjson.dumps({"custom_id": custom_id, "result": {"type": "errored", "error": {
        "type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"}}}})


def anthropic_expired(custom_id: str) -> bytes:
    return orjson.dumps({"custom_id": custom_id, "result": {"type": "expired"}})


def jsonl(lines: list[bytes], final_newline: bool = True) -> bytes:
    return b"\n".join(lines) + (b"\n" if final_newline else b"")
