"""Every real recorded provider response in ../shared/fixtures/recordings/bodies, read as llmmeter reads it.

Each file's expected billing categories are written out below, read by hand from the body
(the comment says where each number comes from). Whole bodies go through read_body /
parse_body; streams (.sse) through StreamTap, fed in small random chunks, and the bytes the
client gets must be the bytes the upstream sent. Then settle() as the meter calls it: on xAI
and Gemini (hidden_output "from_total") the total beyond the categories is billed output.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from proxy.protocol.tap import StreamTap
from proxy.protocol.usage import OUTPUT_FROM_TOTAL, Observed, Usage, parse_body, read_body, settle
from tests.shared_data import RECORDINGS, shared_fixture


@dataclass(frozen=True)
class Want:
    input: int  # uncached input
    cache_read: int
    cache_write: int  # 5-minute writes (and every dialect's writes without TTLs)
    output: int
    reasoning: int | None
    total: int | None = None  # the report's total_tokens, where it gives one
    cache_write_1h: int = 0
    web_search_calls: int = 0
    provider_cost_units: int | None = None  # 10^-10 USD
    iterations: tuple[tuple[int, int, int, int], ...] = ()  # (input, cache_read, cache_write, output) per pass
    geo: str | None = None


EXPECTED: dict[str, Want] = {
    # --- Anthropic Messages: input_tokens excludes the cache; cache_creation split by TTL ---------------
    # input 3, cache_read_input_tokens 1111, writes 0 (5m 0 + 1h 0), output 406; geo "not_available".
    "anthropic-cache-read.json": Want(3, 1111, 0, 406, None, geo="not_available"),
    # cache_creation_input_tokens 1590 = ephemeral_5m 1590 + 1h 0; output_tokens_details.thinking_tokens 0.
    "anthropic-cache-write-1590.json": Want(2, 0, 1590, 4, 0, geo="global"),
    # 418 written (all 5m), 1111 read, 3 uncached.
    "anthropic-cache-write-and-read.json": Want(3, 1111, 418, 33, None, geo="not_available"),
    # usage.iterations: compaction pass 100 in + 55,096 written (5m) + 131 out, message pass 229 in + 5 out.
    # The top level (229 in, 5 out) covers only the last pass: input 329 = 100 + 229, output 136 = 131 + 5.
    "anthropic-compaction-iterations.json": Want(329, 0, 55096, 136, None, geo="global",
                                                 iterations=((100, 0, 55096, 131), (229, 0, 0, 5))),
    # message_start 230 in, 1 out (placeholder); message_delta 230 in, 94 out.
    "anthropic-stream-json-output.sse": Want(230, 0, 0, 94, None, geo="not_available"),
    # message_start 17 in; message_delta output 10.
    "anthropic-stream-plain.sse": Want(17, 0, 0, 10, None, geo="not_available"),
    # message_start: 2 in, 3068 written (5m 3068, 1h 0); the cumulative message_delta supersedes it:
    # 6 in, 6289 read, 3337 written (no split given: 1h stays message_start's 0), 198 out, thinking 0,
    # server_tool_use.web_search_requests 0 (the tool was there, not called).
    "anthropic-stream-prompt-cache.sse": Want(6, 6289, 3337, 198, 0, geo="global"),
    # message_start 43 in; message_delta 282 out (thinking not broken out by this model: reasoning NULL).
    "anthropic-stream-thinking.sse": Want(43, 0, 0, 282, None, geo="not_available"),
    # message_start 2,068 in; message_delta (server tools ran) 22,397 in, 637 out, web_search_requests 2.
    "anthropic-stream-websearch.sse": Want(22397, 0, 0, 637, None, web_search_calls=2),
    # --- OpenAI chat/completions and compatible servers: prompt_tokens includes the cache ------------
    # prompt 15, completion 78 of which reasoning 64; total 93 = 15 + 78.
    "azure-chat-stream-reasoning.sse": Want(15, 0, 0, 78, 64, total=93),
    # prompt 79, completion 37 (reasoning 25); total 116.
    "cerebras-chat-reasoning.json": Want(79, 0, 0, 37, 25, total=116),
    # prompt 214 with cached 64: input 150; completion 54 (reasoning 20); total 268.
    "crusoe-chat-cached.json": Want(150, 64, 0, 54, 20, total=268),
    # usage-only chunk: prompt 46, completion 14, total 60.
    "crusoe-chat-stream.sse": Want(46, 0, 0, 14, None, total=60),
    # DeepSeek: prompt_cache_miss_tokens 51 is the uncached input, hit 512; completion 116 (reasoning 60).
    "deepseek-chat-cache-hit.json": Want(51, 512, 0, 116, 60, total=679),
    # miss 175, hit 320 (also given as cached_tokens 320: not counted twice); completion 144 (reasoning 118).
    "deepseek-chat-json-cache-hit.json": Want(175, 320, 0, 144, 118, total=639),
    # miss 19, hit 320; completion 83 (reasoning 39); total 422 = 339 + 83.
    "deepseek-chat-stream-cache-hit.sse": Want(19, 320, 0, 83, 39, total=422),
    # miss 6, hit 0; completion 212 (reasoning 198).
    "deepseek-chat-stream-reasoning.sse": Want(6, 0, 0, 212, 198, total=218),
    # Gemini's OpenAI endpoint: prompt 35, completion 12, total 109: 62 thinking tokens only in the total.
    "gemini-openai-compat-chat.json": Want(35, 0, 0, 12, None, total=109),
    # prompt 336 with cached 256: input 80; completion 96 (reasoning 59); total 432.
    "groq-chat-cached-reasoning.json": Want(80, 256, 0, 96, 59, total=432),
    # top-level usage (also in x_groq.usage, the same): prompt 304, completion 49 (reasoning 23).
    "groq-chat-stream-usage-and-xgroq.sse": Want(304, 0, 0, 49, 23, total=353),
    # no top-level usage at all: x_groq.usage prompt 5003, completion 359, total 5362.
    "groq-chat-stream-xgroq-only.sse": Want(5003, 0, 0, 359, None, total=5362),
    # prompt 268 with cached 224: input 44; completion 5.
    "mistral-chat-cached.json": Want(44, 224, 0, 5, None, total=273),
    # prompt 171 with cached 128: input 43; completion 14.
    "mistral-chat-stream-cached.sse": Want(43, 128, 0, 14, None, total=185),
    # Moonshot: the usage is inside the last choice; prompt 12, completion 5 (reasoning 1).
    "moonshot-k25-stream-choice-usage.sse": Want(12, 0, 0, 5, 1, total=17),
    # prompt 90, all cached (cached_tokens 90 top level and in prompt_tokens_details); completion 34 (reasoning 17).
    "moonshot-k3-cached-2.json": Want(0, 90, 0, 34, 17, total=124),
    # prompt 101, all cached; completion 32 (reasoning 16).
    "moonshot-k3-cached.json": Want(0, 101, 0, 32, 16, total=133),
    # prompt 90, all cached; completion 50 (reasoning 33).
    "moonshot-k3-stream.sse": Want(0, 90, 0, 50, 33, total=140),
    # prompt 191, nothing cached; completion 97 (reasoning 44).
    "moonshot-k3-tool-nocache.json": Want(191, 0, 0, 97, 44, total=288),
    # prompt 4020 = 4012 cached + 8; completion 4.
    "openai-chat-cache-read.json": Want(8, 4012, 0, 4, 0, total=4024),
    # prompt 4020 = 4012 cache_write_tokens + 8; completion 4.
    "openai-chat-cache-write.json": Want(8, 0, 4012, 4, 0, total=4024),
    # prompt 7; completion 87 (reasoning 64).
    "openai-chat-o3mini-reasoning.json": Want(7, 0, 0, 87, 64, total=94),
    # the usage chunk came though the client did not ask: prompt 78, completion 9.
    "openai-chat-stream-usage-noinclude.sse": Want(78, 0, 0, 9, 0, total=87),
    # prompt 53, completion 15.
    "openai-chat-stream-usage.sse": Want(53, 0, 0, 15, 0, total=68),
    # legacy completions: prompt 14, completion 16.
    "openai-completions-stream.sse": Want(14, 0, 0, 16, None, total=30),
    "openai-completions.json": Want(14, 0, 0, 16, None, total=30),
    # embeddings: prompt 12 = total 12, no output.
    "openai-embeddings.json": Want(12, 0, 0, 0, None, total=12),
    # Perplexity repeats a cumulative usage in every chunk: the last one wins (11 in, 434 out), never summed.
    "perplexity-chat-stream-cumulative.sse": Want(11, 0, 0, 434, None, total=445),
    # Qwen: prompt 295, completion 22.
    "qwen-chat-stream-tool.sse": Want(295, 0, 0, 22, None, total=317),
    # Z.ai: prompt 13, completion 564 (reasoning 561).
    "zai-glm-chat-stream-reasoning.sse": Want(13, 0, 0, 564, 561, total=577),
    # prompt 435 with cached 4: input 431; completion 73 (reasoning 56).
    "zai-glm-chat-vision-cached.json": Want(431, 4, 0, 73, 56, total=508),
    # --- xAI: reasoning outside completion_tokens, cost in ticks (10^-10 USD) ---------------------------
    # prompt 291 with cached 244: input 47; completion 26; reasoning 189; total 506 = 291 + 26 + 189;
    # cost_in_usd_ticks 1,399,000 = $0.0001399.
    "xai-chat-tool-reasoning.json": Want(47, 244, 0, 26, 189, total=506, provider_cost_units=1_399_000),
    # prompt 12 with cached 11: input 1; completion 1; reasoning 290; total 303 = 12 + 1 + 290; ticks 1,466,250.
    "xai-chat-stream-reasoning.sse": Want(1, 11, 0, 1, 290, total=303, provider_cost_units=1_466_250),
    # Responses: input 1875 with cached 1578: 297 uncached; output 695 (reasoning 397); total 2570 = 1875 + 695;
    # one web_search_call item (no action given) in the final output, repeated in three events.
    "xai-responses-stream-websearch.sse": Want(297, 1578, 0, 695, 397, total=2570, web_search_calls=1),
    # --- OpenRouter: usage.cost in USD, is_byok false --------------------------------------------------
    # prompt 687 with cached 679: input 8; completion 187 (reasoning 118); cost 0.00333825 USD = 33,382,500 units.
    "openrouter-chat-stream-cached-reasoning.sse": Want(8, 679, 0, 187, 118, total=874,
                                                        provider_cost_units=33_382_500),
    # prompt 107, completion 15; cost 0.0001017 USD = 1,017,000 units.
    "openrouter-kimi-k2-stream.sse": Want(107, 0, 0, 15, 0, total=122, provider_cost_units=1_017_000),
    # Responses: input 4020 with cached 4012; output 5; cost 0.002196 USD = 21,960,000 units.
    "openrouter-responses-cache-read.json": Want(8, 4012, 0, 5, 0, total=4025, provider_cost_units=21_960_000),
    # input 4020 with cache_write_tokens 4012; output 5; cost 0.025265 USD = 252,650,000 units.
    "openrouter-responses-cache-write.json": Want(8, 0, 4012, 5, 0, total=4025, provider_cost_units=252_650_000),
    # --- OpenAI Responses: input_tokens includes the cache ---------------------------------------------
    # input 2143 with cached 1280: 863; output 919 (reasoning 576); a code_interpreter_call is no web search.
    "azure-responses-stream-code-interpreter.sse": Want(863, 1280, 0, 919, 576, total=3062),
    # DeepSeek's Responses: input 366 with cached 256: 110; output 59 (reasoning 14).
    "deepseek-responses-stream.sse": Want(110, 256, 0, 59, 14, total=425),
    # input 376 with cached 256: 120; output 81 (reasoning 21).
    "deepseek-responses.json": Want(120, 256, 0, 81, 21, total=457),
    # input 4020 with cached 4012; output 5.
    "openai-responses-cache-read.json": Want(8, 4012, 0, 5, 0, total=4025),
    # input 4020 with cache_write_tokens 4012; output 5.
    "openai-responses-cache-write.json": Want(8, 0, 4012, 5, 0, total=4025),
    # input 7243 with cached 3072: 4171; output 423 (reasoning 58).
    "openai-responses-phase.json": Want(4171, 3072, 0, 423, 58, total=7666),
    # input 11; output 5.
    "openai-responses-stream-basic.sse": Want(11, 0, 0, 5, 0, total=16),
    # service_tier flex; input 53; output 469 (reasoning 448); a function_call is no web search.
    "openai-responses-stream-reasoning.sse": Want(53, 0, 0, 469, 448, total=522),
    # input 9463 with cached 8320: 1143; output 582 (reasoning 512); one web_search_call (action.type
    # "search"), in output_item.added, .done and response.completed: counted once.
    "openai-responses-stream-websearch.sse": Want(1143, 8320, 0, 582, 512, total=10045, web_search_calls=1),
    # input 9299 with cached 8448: 851; output 577 (reasoning 512); one web_search_call with action "search".
    "openai-responses-websearch.json": Want(851, 8448, 0, 577, 512, total=9876, web_search_calls=1),
}

# The upstreams whose hidden_output is "from_total" by default (api.x.ai, generativelanguage.googleapis.com).
FROM_TOTAL = ("xai-", "gemini-")
# After settle() there: output += total - input side - output, reasoning the reported count or the difference.
HIDDEN = {
    "xai-chat-tool-reasoning.json": (215, 189),  # 26 + (506 - 291 - 26) = 26 + 189
    "xai-chat-stream-reasoning.sse": (291, 290),  # 1 + (303 - 12 - 1) = 1 + 290
    "gemini-openai-compat-chat.json": (74, 62),  # 12 + (109 - 35 - 12) = 12 + 62, reasoning the difference
}


def endpoint(name: str) -> str:
    if name.startswith("anthropic-"):
        return "messages"
    if "-responses" in name:
        return "responses"
    for kind in ("embeddings", "completions"):
        if f"-{kind}" in name:
            return kind
    return "chat"


def observe(path: Path, seed: int, drop: bool = False) -> Observed:
    data = path.read_bytes()
    name = path.name
    if path.suffix == ".json":
        observed, _ = read_body(endpoint(name), data)
        assert parse_body(endpoint(name), data)[0] == observed
        return observed
    rnd = random.Random(seed)
    tap = StreamTap(endpoint(name), drop)
    out = bytearray()
    at = 0
    while at < len(data):
        n = rnd.randint(1, 97)
        out += tap.feed(data[at:at + n])
        at += n
    out += tap.finish()
    assert tap.done and not tap.faults
    if not drop:
        assert bytes(out) == data  # relayed byte for byte
    return tap.observed()


def test_every_recording_is_expected() -> None:
    folder = shared_fixture(RECORDINGS)
    assert sorted(p.name for p in folder.iterdir()) == sorted(EXPECTED)
    assert len(EXPECTED) == 57


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recording(name: str) -> None:
    want = EXPECTED[name]
    path = shared_fixture(RECORDINGS / name)
    for seed in range(3):
        observed = observe(path, seed)
        u = observed.usage
        assert u is not None
        assert (u.input_tokens, u.cache_read_tokens, u.cache_write_tokens, u.output_tokens, u.reasoning_tokens) == (
            want.input, want.cache_read, want.cache_write, want.output, want.reasoning)
        assert (u.total_tokens, u.cache_write_1h_tokens, u.web_search_calls, u.provider_cost_units) == (
            want.total, want.cache_write_1h, want.web_search_calls, want.provider_cost_units)
        assert [(p.input_tokens, p.cache_read_tokens, p.cache_write_tokens, p.output_tokens)
                for p in u.iterations] == list(want.iterations)
        assert u.flags == () and observed.faults == ()
        assert observed.inference_geo == want.geo
        if endpoint(name) == "chat" and path.suffix == ".sse":  # the proxy's own usage chunk removed: same usage
            assert observe(path, seed, drop=True).usage == u


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_settled_as_the_meter_does(name: str) -> None:
    u = observe(shared_fixture(RECORDINGS / name), 0).usage
    assert u is not None
    from_total = name.startswith(FROM_TOTAL)
    settled = settle(u, None, from_total)
    if name in HIDDEN:
        assert (settled.output_tokens, settled.reasoning_tokens) == HIDDEN[name]
        assert settled.flags == (OUTPUT_FROM_TOTAL,)
        assert settled.input_side_tokens == u.input_side_tokens
    else:  # every other report adds up: nothing moves, nothing is flagged, whatever the upstream's setting
        assert settled == u
        assert settle(u, None, not from_total) == u


def test_anthropic_iterations_are_usages_of_their_own() -> None:
    u = observe(shared_fixture(RECORDINGS / "anthropic-compaction-iterations.json"), 0).usage
    assert u is not None and all(isinstance(p, Usage) and not p.iterations for p in u.iterations)
    # Each pass has its own input side (for its own long-context band): 55,196 and 229.
    assert [p.input_side_tokens for p in u.iterations] == [55196, 229]
    assert u.input_side_tokens == 55425
