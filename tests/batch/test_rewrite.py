"""Anthropic batch objects name their results_url on the provider's host; with
server.public_url set, llmmeter names itself there instead (proxy/relay/batch.py named_here)."""

from __future__ import annotations

import gzip
from typing import Any

import orjson

from proxy.relay.batch import named_here

PUBLIC = "https://llm.example.internal:8443/gw"


def batch(results_url: str | None, batch_id: str = "msgbatch_013Zva2CMHLNnXjNJJKqJ2EF") -> dict[str, Any]:
    return {"id": batch_id, "type": "message_batch", "processing_status": "ended",
            "request_counts": {"processing": 0, "succeeded": 100, "errored": 0, "canceled": 0, "expired": 0},
            "ended_at": "2024-08-20T18:37:24.100435Z", "created_at": "2024-08-20T18:37:24.100435Z",
            "expires_at": "2024-08-20T18:37:24.100435Z", "archived_at": None, "cancel_initiated_at": None,
            "results_url": results_url}


def test_a_batch_object_names_llmmeter_under_the_same_path() -> None:
    given = batch("https://api.anthropic.com/v1/messages/batches/msgbatch_013Zva2CMHLNnXjNJJKqJ2EF/results")
    out = named_here(orjson.dumps(given), "", PUBLIC)
    assert out is not None
    got = orjson.loads(out)
    assert got.pop("results_url") == PUBLIC + "/v1/messages/batches/msgbatch_013Zva2CMHLNnXjNJJKqJ2EF/results"
    given.pop("results_url")
    assert got == given


def test_an_upstream_base_path_and_a_query_are_kept_in_the_right_places() -> None:
    # An upstream behind a gateway prefix: every path llmmeter relays is /v1/..., whatever the upstream's.
    given = batch("https://gw.example.com/anthropic/v1/messages/batches/b1/results?beta=true")
    out = named_here(orjson.dumps(given), "", "http://127.0.0.1:8080")
    assert out is not None
    assert orjson.loads(out)["results_url"] == "http://127.0.0.1:8080/v1/messages/batches/b1/results?beta=true"


def test_a_page_of_batches_is_rewritten_item_by_item() -> None:
    page = {"data": [batch("https://api.anthropic.com/v1/messages/batches/a/results", "a"), batch(None, "b"),
                     batch("https://api.anthropic.com/v1/messages/batches/c/results", "c")],
            "has_more": True, "first_id": "a", "last_id": "c"}
    out = named_here(orjson.dumps(page), "", PUBLIC)
    assert out is not None
    assert [b["results_url"] for b in orjson.loads(out)["data"]] == \
        [PUBLIC + "/v1/messages/batches/a/results", None, PUBLIC + "/v1/messages/batches/c/results"]


def test_nothing_to_change_is_no_rewrite() -> None:
    assert named_here(orjson.dumps(batch(None)), "", PUBLIC) is None  # in progress
    assert named_here(b'{"type": "error", "error": {"type": "not_found_error"}}', "", PUBLIC) is None
    assert named_here(b"not json", "", PUBLIC) is None
    assert named_here(b"[1, 2]", "", PUBLIC) is None
    assert named_here(orjson.dumps(batch("https://elsewhere.example/some/file.jsonl")), "", PUBLIC) is None
    assert named_here(orjson.dumps(batch(PUBLIC + "/v1/messages/batches/x/results")), "", PUBLIC) is None


def test_a_body_compressed_although_identity_was_asked_for() -> None:
    given = batch("https://api.anthropic.com/v1/messages/batches/z/results", "z")
    out = named_here(gzip.compress(orjson.dumps(given)), "gzip", PUBLIC)
    assert out is not None and orjson.loads(out)["results_url"] == PUBLIC + "/v1/messages/batches/z/results"
    assert named_here(b"\x1f\x8b broken", "gzip", PUBLIC) is None
    assert named_here(b"whatever", "br", PUBLIC) is None  # a coding llmmeter cannot read: relayed as it came
