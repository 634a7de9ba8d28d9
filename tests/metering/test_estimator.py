"""The offline estimator, both engines: no network, the cookbook recipe, odd bodies, threads."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tiktoken

from proxy.metering.estimate.estimator import (
    SUPPORTED_ENCODINGS,
    VOCABULARIES,
    Estimator,
    check_encoding,
    unpack_vocabulary,
)
from proxy.metering.estimate.prompts import REPLY_PRIMING, TOKENS_PER_MESSAGE, TOKENS_PER_NAME
from tests.strict import require

ROOT = Path(__file__).resolve().parents[2]

# Run in a fresh interpreter: watches sockets (audit hook) and calls into tiktoken's
# downloader and our loader (profile hook) without replacing any code, then reports.
PROBE = r"""
import json, os, sys, threading

opens, sockets = {}, []
def audit(event, args):
    if event.startswith("socket."):
        sockets.append(event)
    elif event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.fsdecode(args[0])
        opens[path] = opens.get(path, 0) + 1
sys.addaudithook(audit)

from pathlib import Path
import tiktoken, tiktoken.load
import proxy.metering.estimate.compact, proxy.metering.estimate.estimator
watched = {
    tiktoken.load.read_file.__code__: "read_file",  # tiktoken's downloader
    tiktoken.get_encoding.__code__: "get_encoding",
    proxy.metering.estimate.estimator.unpack_vocabulary.__code__: "unpack_vocabulary",
    proxy.metering.estimate.compact.CompactBpe.__init__.__code__: "compact",
}
calls = dict.fromkeys(watched.values(), 0)
def profile(frame, event, arg):
    if event == "call" and frame.f_code in watched:
        calls[watched[frame.f_code]] += 1
sys.setprofile(profile)
threading.setprofile(profile)

cache = os.environ.get("PROBE_CACHE_DIR")
n = int(os.environ.get("PROBE_THREADS", "1"))
counts = {}
for name in os.environ.get("PROBE_ENCODINGS", "o200k_base").split(","):
    est = proxy.metering.estimate.estimator.Estimator(name, cache_dir=Path(cache) if cache else None,
                                 engine=os.environ.get("PROBE_ENGINE", "tiktoken"))
    barrier, got = threading.Barrier(n), []
    def work():
        barrier.wait()
        got.append(est.count_text(None, "hello world"))
    threads = [threading.Thread(target=work) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts[name] = got
sys.setprofile(None)
threading.setprofile(None)
print(json.dumps({"counts": counts, "calls": calls, "sockets": sockets, "opens": opens,
                  "cache_dir": os.environ.get("TIKTOKEN_CACHE_DIR")}))
"""


def probe(tmp_path: Path, prefix: tuple[str, ...] = (), **env: str) -> dict[str, Any]:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR", "XDG_CACHE_HOME")}
    # Any download would have to go through this dead proxy (and unshare -n, where used).
    dead = "http://127.0.0.1:9"
    clean.update(HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "xdg"),
                 HTTP_PROXY=dead, HTTPS_PROXY=dead, ALL_PROXY=dead, http_proxy=dead, https_proxy=dead)
    clean.update(env)
    done = subprocess.run([*prefix, sys.executable, "-c", PROBE], cwd=ROOT, env=clean,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def cache_file(directory: Path, name: str) -> Path:
    return directory / hashlib.sha1(VOCABULARIES[name].url.encode()).hexdigest()


def assert_offline(result: dict[str, Any]) -> None:
    assert result["sockets"] == []
    assert result["calls"]["read_file"] == 0


# --- offline loading -------------------------------------------------------------


def can_unshare() -> bool:
    try:
        return subprocess.run(["unshare", "-n", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def test_counts_under_unshare_without_network(tmp_path: Path) -> None:
    require(can_unshare(), "`unshare -n true` failed: cannot run a process without network here")
    result = probe(tmp_path, ("unshare", "-n"), PROBE_ENCODINGS="o200k_base,cl100k_base")
    assert result["counts"] == {"o200k_base": [2], "cl100k_base": [2]}
    default = tmp_path / "xdg" / "llmmeter" / "tiktoken"  # TIKTOKEN_CACHE_DIR was unset
    assert result["cache_dir"] == str(default)
    for name in SUPPORTED_ENCODINGS:
        assert cache_file(default, name).is_file()
    assert_offline(result)


def test_the_compact_engine_counts_offline_and_writes_nothing(tmp_path: Path) -> None:
    require(can_unshare(), "`unshare -n true` failed: cannot run a process without network here")
    result = probe(tmp_path, ("unshare", "-n"), PROBE_ENCODINGS="o200k_base,cl100k_base",
                   PROBE_ENGINE="compact", PROBE_THREADS="4")
    assert result["counts"] == {"o200k_base": [2] * 4, "cl100k_base": [2] * 4}
    assert result["calls"]["compact"] == 2  # once per encoding, however many threads asked
    assert result["calls"]["get_encoding"] == result["calls"]["unpack_vocabulary"] == 0
    assert result["cache_dir"] is None  # tiktoken's cache is not touched
    assert not (tmp_path / "xdg").exists() and not (tmp_path / "home").exists()
    assert_offline(result)


def test_no_download_is_attempted_cold_or_warm(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cold = probe(tmp_path, PROBE_CACHE_DIR=str(cache))
    assert cold["counts"] == {"o200k_base": [2]}
    assert cold["cache_dir"] == str(cache)
    assert_offline(cold)
    # Filled now: tiktoken reads its cache; our copy is not unpacked again.
    warm = probe(tmp_path, PROBE_CACHE_DIR=str(cache))
    assert warm["counts"] == {"o200k_base": [2]}
    assert_offline(warm)
    packed = [p for p in warm["opens"] if p.endswith("o200k_base.tiktoken.gz")]
    assert packed == []
    assert sorted(p.name for p in cache.iterdir()) == [cache_file(cache, "o200k_base").name]


def test_a_users_tiktoken_cache_dir_is_used_and_filled(tmp_path: Path) -> None:
    theirs, ours = tmp_path / "theirs", tmp_path / "ours"
    result = probe(tmp_path, PROBE_CACHE_DIR=str(ours), TIKTOKEN_CACHE_DIR=str(theirs))
    assert result["counts"] == {"o200k_base": [2]}
    assert result["cache_dir"] == str(theirs)
    assert cache_file(theirs, "o200k_base").is_file()
    assert not ours.exists()
    assert_offline(result)


def test_an_empty_tiktoken_cache_dir_does_not_mean_download(tmp_path: Path) -> None:
    ours = tmp_path / "ours"
    result = probe(tmp_path, PROBE_CACHE_DIR=str(ours), TIKTOKEN_CACHE_DIR="")
    assert result["counts"] == {"o200k_base": [2]}
    assert result["cache_dir"] == str(ours)
    assert_offline(result)


def test_eight_threads_load_the_encoding_once(tmp_path: Path) -> None:
    result = probe(tmp_path, PROBE_CACHE_DIR=str(tmp_path / "cache"), PROBE_THREADS="8")
    assert result["counts"] == {"o200k_base": [2] * 8}
    assert result["calls"]["unpack_vocabulary"] == 1
    assert result["calls"]["get_encoding"] == 1
    packed = [n for p, n in result["opens"].items() if p.endswith("o200k_base.tiktoken.gz")]
    assert packed == [1]
    assert_offline(result)


def test_pins_match_tiktokens_own() -> None:
    spec = importlib.util.find_spec("tiktoken_ext.openai_public")
    assert spec is not None and spec.origin is not None
    source = Path(spec.origin).read_text()
    for name, vocab in VOCABULARIES.items():
        body = re.search(rf"^def {name}\(\):\n(.*?)^def ", source, re.S | re.M)
        assert body is not None, name
        assert f'"{vocab.url}"' in body.group(1)
        assert f'expected_hash="{vocab.sha256}"' in body.group(1)


def test_a_corrupt_cache_file_is_replaced(tmp_path: Path) -> None:
    target = cache_file(tmp_path, "cl100k_base")
    target.write_bytes(b"truncated")  # tiktoken would delete this and download
    assert unpack_vocabulary("cl100k_base", tmp_path) == target
    assert hashlib.sha256(target.read_bytes()).hexdigest() == VOCABULARIES["cl100k_base"].sha256
    assert [p.name for p in tmp_path.iterdir()] == [target.name]  # no temp file left


# --- in-process counting (cache filled once, TIKTOKEN_CACHE_DIR restored after) -----


@pytest.fixture(scope="module")
def tiktoken_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path_factory.mktemp("tiktoken")))
        e = Estimator(engine="tiktoken")
        for name in SUPPORTED_ENCODINGS:
            e.load(name)
        yield


@pytest.fixture(scope="module", params=["compact", "tiktoken"])
def est(request: pytest.FixtureRequest, tiktoken_cache: None) -> Estimator:
    e = Estimator("o200k_base", [(["gpt-4", "gpt-4-0*"], "cl100k_base")], engine=request.param)
    for name in SUPPORTED_ENCODINGS:
        e.load(name)
    return e


@pytest.fixture(scope="module")
def o200k(tiktoken_cache: None) -> tiktoken.Encoding:
    return tiktoken.get_encoding("o200k_base")  # tiktoken's own, for independent expectations


def n(enc: tiktoken.Encoding, text: str) -> int:
    return len(enc.encode(text))


def test_hello_world_ids(est: Estimator) -> None:
    assert tiktoken.get_encoding("o200k_base").encode("hello world") == [24912, 2375]
    assert tiktoken.get_encoding("cl100k_base").encode("hello world") == [15339, 1917]
    assert est.count_text("gpt-4o", "hello world") == 2
    assert est.count_text("gpt-4", "hello world") == 2
    assert est.count_text(None, "") == 0
    assert est.count_text(None, "<|endoftext|>") > 1  # plain text here, not a special token


def test_encoding_for_uses_the_first_matching_glob() -> None:
    e = Estimator("o200k_base", [(["gpt-4-*", "gpt-3.5*"], "cl100k_base"), (["gpt-4-turbo*"], "o200k_base")])
    assert e.encoding_for("gpt-4-turbo") == "cl100k_base"
    assert e.encoding_for("gpt-3.5-turbo") == "cl100k_base"
    assert e.encoding_for("gpt-4o") == "o200k_base"
    assert e.encoding_for("GPT-4-0613") == "o200k_base"  # globs are case-sensitive, like upstream routing
    assert e.encoding_for(None) == "o200k_base"
    assert Estimator("cl100k_base").encoding_for("anything") == "cl100k_base"


def test_unsupported_encodings_fail_at_construction() -> None:
    with pytest.raises(ValueError, match="o200k_base, cl100k_base"):
        check_encoding("p50k_base")
    check_encoding("cl100k_base")
    with pytest.raises(ValueError, match="r50k_base"):
        Estimator("r50k_base")
    with pytest.raises(ValueError, match="gpt2"):
        Estimator(per_model=[(["x*"], "gpt2")])
    with pytest.raises(ValueError, match="tiktoken, compact"):
        Estimator(engine="rust")


def test_recipe_constants_are_the_cookbooks() -> None:
    assert (TOKENS_PER_MESSAGE, TOKENS_PER_NAME, REPLY_PRIMING) == (3, 1, 3)


def test_chat_two_messages(est: Estimator, o200k: tiktoken.Encoding) -> None:
    messages = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "How many tokens are in this question?"}]
    expected = sum(3 + n(o200k, m["role"]) + n(o200k, m["content"]) for m in messages) + 3
    assert est.prompt_tokens("chat", "gpt-4o", {"model": "gpt-4o", "messages": messages}) == expected


def test_chat_matches_the_cookbooks_published_count(est: Estimator) -> None:
    # The cookbook's example conversation: 129 prompt tokens for gpt-4-0613, checked there against the API.
    messages = [
        {"role": "system", "content": "You are a helpful, pattern-following assistant that translates "
                                      "corporate jargon into plain English."},
        {"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
        {"role": "system", "name": "example_assistant",
         "content": "Things working well together will increase revenue."},
        {"role": "system", "name": "example_user", "content": "Let's circle back when we have more bandwidth "
                                                              "to touch base on opportunities for increased leverage."},
        {"role": "system", "name": "example_assistant",
         "content": "Let's talk later when we're less busy about how to do better."},
        {"role": "user", "content": "This late pivot means we don't have time to boil the ocean for the client "
                                    "deliverable."},
    ]
    assert est.prompt_tokens("chat", "gpt-4-0613", {"messages": messages}) == 129


def test_chat_name_bonus(est: Estimator, o200k: tiktoken.Encoding) -> None:
    plain = {"messages": [{"role": "user", "content": "hi"}]}
    named = {"messages": [{"role": "user", "name": "alice", "content": "hi"}]}
    bonus = est.prompt_tokens("chat", None, named) - est.prompt_tokens("chat", None, plain)
    assert bonus == n(o200k, "alice") + 1


def test_chat_content_parts(est: Estimator, o200k: tiktoken.Encoding) -> None:
    parts = [{"type": "text", "text": "Describe this picture"},
             {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},  # counts nothing
             {"type": "text", "text": " in one line."}]
    got = est.prompt_tokens("chat", None, {"messages": [{"role": "user", "content": parts}]})
    assert got == 3 + n(o200k, "user") + n(o200k, "Describe this picture") + n(o200k, " in one line.") + 3


def test_chat_tool_calls_and_tools(est: Estimator, o200k: tiktoken.Encoding) -> None:
    args = '{"city":"Paris"}'
    function = {"name": "get_weather", "arguments": args}
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": function}]}
    reply = {"role": "tool", "tool_call_id": "call_1", "content": "18C"}
    got = est.prompt_tokens("chat", None, {"messages": [call, reply]})
    assert got == (3 + n(o200k, "assistant") + n(o200k, "get_weather") + n(o200k, args)
                   + 3 + n(o200k, "tool") + n(o200k, "call_1") + n(o200k, "18C") + 3)
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                                               "parameters": {"type": "object"}}}]
    with_tools = est.prompt_tokens("chat", None, {"messages": [call, reply], "tools": tools})
    assert with_tools - got == n(o200k, json.dumps(tools, separators=(",", ":")))


@pytest.mark.parametrize("endpoint,key", [("completions", "prompt"), ("embeddings", "input")])
def test_raw_prompt_shapes(est: Estimator, endpoint: str, key: str) -> None:
    def count(value: object) -> int:
        return est.prompt_tokens(endpoint, None, {key: value})

    assert count("hello world") == 2
    assert count(["hello world", "hello world"]) == 4
    assert count([24912, 2375, 0]) == 3  # already tokens
    assert count([[24912, 2375], [0]]) == 3
    assert count(["hello world", 7, [1, 2], None, True, 1.5, {"a": 1}]) == 2 + 1 + 2


def test_responses_input(est: Estimator, o200k: tiktoken.Encoding) -> None:
    simple = {"instructions": "Be brief.", "input": "hello world"}
    assert est.prompt_tokens("responses", None, simple) == (
        3 + n(o200k, "system") + n(o200k, "Be brief.") + 3 + n(o200k, "user") + 2 + 3)
    items = {"input": [
        {"role": "user", "content": [{"type": "input_text", "text": "hello world"},
                                     {"type": "input_image", "image_url": "https://example.invalid/a.png"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hi."}]},
        {"type": "function_call", "call_id": "c", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "none"},
    ]}
    assert est.prompt_tokens("responses", None, items) == (
        3 + n(o200k, "user") + 2 + 3 + n(o200k, "assistant") + n(o200k, "Hi.")
        + 3 + n(o200k, "lookup") + n(o200k, "{}") + 3 + n(o200k, "none") + 3)


def test_anthropic_messages(est: Estimator, o200k: tiktoken.Encoding) -> None:
    body = {"system": [{"type": "text", "text": "Be brief."}], "messages": [
        {"role": "user", "content": "hello world"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": "x"},
                                          {"type": "tool_use", "id": "t", "name": "lookup", "input": {"q": "x"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "found"},
                                     {"type": "image", "source": {"type": "base64", "data": "AAAA"}},
                                     {"type": "text", "text": "Thanks"}]},
    ]}
    assert est.prompt_tokens("messages", None, body) == (
        3 + n(o200k, "system") + n(o200k, "Be brief.")
        + 3 + n(o200k, "user") + 2
        + 3 + n(o200k, "assistant") + n(o200k, "lookup") + n(o200k, '{"q":"x"}')
        + 3 + n(o200k, "user") + n(o200k, "found") + n(o200k, "Thanks") + 3)
    assert est.prompt_tokens("messages", None, {**body, "system": "Be brief."}) == est.prompt_tokens(
        "messages", None, body)


def deep(levels: int) -> list[Any]:
    x: list[Any] = []
    for _ in range(levels):
        x = [x]
    return x


ODD: list[object] = [
    None, 0, 1.5, True, "text", b"bytes", [], {}, [1, 2], {"messages": None}, {"messages": "hi"},
    {"messages": [None, 1, "x", [], {"role": 5, "content": {"a": [1]}, "name": 3}]},
    {"messages": [{"content": [None, 7, {"type": "text", "text": None}, {"type": "text", "text": ["x"]},
                               {"type": None}, {"text": "no type"}]}]},
    {"messages": [{"role": "assistant", "tool_calls": [None, {"function": None}, {"function": {"name": 1}}],
                   "function_call": "x"}]},
    {"prompt": {"a": 1}, "input": 3, "suffix": 4, "instructions": ["x"]},
    {"prompt": [[None, "x", [1]]], "input": [{"type": "function_call", "name": None}, "x", 1]},
    {"system": [None, {"type": "text"}], "messages": [{"content": [{"type": "tool_result", "content": 9},
                                                                   {"type": "tool_use", "input": {1, 2}}]}]},
    {"tools": deep(100_000), "messages": [{"content": deep(100_000)}], "input": deep(100_000)},
    {"tools": {(1, 2): "tuple keys"}, "functions": float("nan")},
    {"messages": [{"role": "user", "content": "\ud800 lone surrogate"}]},
]


@pytest.mark.parametrize("endpoint", ["chat", "completions", "embeddings", "responses", "messages", "models"])
@pytest.mark.parametrize("body", ODD, ids=range(len(ODD)))
def test_odd_shapes_never_raise(est: Estimator, endpoint: str, body: object) -> None:
    got = est.prompt_tokens(endpoint, "gpt-4o", body)
    assert isinstance(got, int)
    assert got >= 0
