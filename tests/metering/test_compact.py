"""The compact counter against tiktoken itself: same counts for every code point and text,
a fraction of the memory, and pauses an event loop can use."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest
import regex
import tiktoken

from proxy.metering.estimate.compact import (
    CHUNK,
    LONG,
    MARGIN,
    SLICE,
    CompactBpe,
    _windows,
    compile_pattern,
    unassigned_ranges,
)
from proxy.metering.estimate.estimator import SUPPORTED_ENCODINGS, VOCABULARIES, Estimator
from proxy.metering.estimate.steps import run
from tests.shared_data import LLAMA_CPP

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[CompactBpe, tiktoken.Encoding]]]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path_factory.mktemp("tiktoken")))
        reference = Estimator(engine="tiktoken")
        out = {}
        for name in SUPPORTED_ENCODINGS:
            reference.load(name)
            out[name] = (CompactBpe(name, VOCABULARIES[name].sha256), tiktoken.get_encoding(name))
        yield out


def tiktoken_count(enc: tiktoken.Encoding, text: str) -> int:
    return len(enc.encode_ordinary(text))


@pytest.mark.parametrize("name", SUPPORTED_ENCODINGS)
def test_patterns_are_tiktokens(pair: dict[str, tuple[CompactBpe, tiktoken.Encoding]], name: str) -> None:
    from proxy.metering.estimate.compact import PATTERNS
    assert PATTERNS[name] == pair[name][1]._pat_str


def probe(ch: str) -> str:
    return f"a{ch}a {ch}1'll\n{ch} A{ch}'S {ch}{ch}\t{ch}"


@pytest.mark.parametrize("name", SUPPORTED_ENCODINGS)
def test_every_code_point_that_could_differ_counts_the_same(
        pair: dict[str, tuple[CompactBpe, tiktoken.Encoding]], name: str) -> None:
    compact, enc = pair[name]
    classed = regex.compile(r"[\p{L}\p{M}\p{N}\s]")
    # Where the `regex` module and Python's own Unicode tables disagree is where a newer
    # Unicode shows: all of those, the table's ranges, and every 29th code point besides.
    gap = {cp for lo, hi in unassigned_ranges() for cp in range(lo, hi + 1)}
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp < 0xE000 and (
        cp in gap or cp % 29 == 0
        or (unicodedata.category(chr(cp)) == "Cn" and classed.match(chr(cp))))]
    assert len(cps) > 50_000
    wrong = [hex(cp) for cp in cps if compact.count(probe(chr(cp))) != tiktoken_count(enc, probe(chr(cp)))]
    assert wrong == []


@pytest.mark.parametrize("name", SUPPORTED_ENCODINGS)
def test_random_mixed_text_counts_the_same(pair: dict[str, tuple[CompactBpe, tiktoken.Encoding]], name: str) -> None:
    compact, enc = pair[name]
    rnd = random.Random(7)
    pool = ([chr(c) for c in range(0x20, 0x7F)] * 8 + [chr(c) for c in range(0x80, 0x3000)]
            + [chr(c) for c in range(0x1F300, 0x1FAFF)] + [chr(c) for c in range(0x4E00, 0x5000)])
    common = [" ", "  ", "\n", "\r\n", "\t", "'s", "'LL", "'Ve", " the", "1234567", "/", "...", "```"]
    texts = ["".join(rnd.choice(pool) if rnd.random() < 0.6 else rnd.choice(common)
                     for _ in range(rnd.randint(1, 120))) for _ in range(3000)]
    assert [compact.count(t) for t in texts] == [tiktoken_count(enc, t) for t in texts]


@pytest.mark.parametrize("name", SUPPORTED_ENCODINGS)
def test_windows_find_the_pieces_of_the_whole_text(name: str) -> None:
    pattern = compile_pattern(name)
    rnd = random.Random(5)
    # Contractions, whitespace runs before letters, digits and line ends: what looks ahead.
    parts = ["don't", "WE'LL", "it's", " ", "   ", "\n", "\r\n", "\t", "a", "Ab", "ABC", "12345", "'", "'s",
             "/", "?!", " x", "é", "日本", "😀", "\n\n  ", "x" * 40]
    for _ in range(400):
        text = "".join(rnd.choice(parts) for _ in range(rnd.randint(1, 80)))
        whole = pattern.findall(text)
        for chunk in (MARGIN + 1, 24, 40, 100):
            assert [p for w in _windows(pattern, text, chunk) for p in w] == whole, (text, chunk)


def corpus() -> Iterator[str]:
    # The real wire captures beside the checkout count too, when they are there (text the server wrote).
    captures = sorted(LLAMA_CPP.glob("**/*")) if LLAMA_CPP.exists() else []
    for path in sorted([*ROOT.glob("*.md"), *ROOT.glob("proxy/**/*.py")]) + captures:
        if path.is_file():
            yield path.read_text(errors="replace")


@pytest.mark.parametrize("name", SUPPORTED_ENCODINGS)
def test_real_files_count_the_same(pair: dict[str, tuple[CompactBpe, tiktoken.Encoding]], name: str) -> None:
    compact, enc = pair[name]
    texts = list(corpus())
    assert sum(map(len, texts)) > 100_000
    assert [compact.count(t) for t in texts] == [tiktoken_count(enc, t) for t in texts]


@pytest.mark.parametrize("text", [
    "x" * 5000,  # one piece of 5,000 bytes: the merge loop, not a lookup
    "".join(chr(0x1F600 + i % 80) for i in range(800)),  # 4-byte characters merged pairwise
    json.dumps({"b64": "QUJD" * 700, "n": list(range(300))}),
    "\ud800 lone \udfff surrogates \ud83d\ude00",  # replaced, as tiktoken does
    "<|endoftext|> is text here", "", " ", "\n\n\n", "a\u0301\u0302" * 50, "٣٤٥ ١٢ 12345678",
])
def test_edge_texts_count_the_same(pair: dict[str, tuple[CompactBpe, tiktoken.Encoding]], text: str) -> None:
    for name in SUPPORTED_ENCODINGS:
        compact, enc = pair[name]
        assert compact.count(text) == tiktoken_count(enc, text), name


@pytest.mark.parametrize("name", SUPPORTED_ENCODINGS)
def test_long_pieces_merge_as_tiktoken_does(pair: dict[str, tuple[CompactBpe, tiktoken.Encoding]], name: str) -> None:
    compact, enc = pair[name]
    rnd = random.Random(11)
    alphabets = ["abcdefghijklmnopqrstuvwxyz", "ab", "x", "éàüßçñ", "日本語中文字", "абвгдеж", "θικλμ"]
    # Runs of letters are single pieces; beyond LONG bytes they take the heap merge.
    texts = ["".join(rnd.choice(a) for _ in range(rnd.randint(LONG, 3000))) for a in alphabets for _ in range(20)]
    assert all(len(t.encode()) > LONG for t in texts)
    assert [compact.count(t) for t in texts] == [tiktoken_count(enc, t) for t in texts]
    steps, pauses = compact.steps("x" * 20_000), 0  # one piece, 2,500 tokens: ~17,500 merges
    with pytest.raises(StopIteration):
        while True:
            next(steps)
            pauses += 1
    assert pauses >= 17_500 // SLICE


def test_a_vocabulary_that_is_not_tiktokens_is_refused() -> None:
    with pytest.raises(RuntimeError, match="does not match the sha256 tiktoken pins"):
        CompactBpe("cl100k_base", "0" * 64)


def test_counting_pauses_every_slice(pair: dict[str, tuple[CompactBpe, tiktoken.Encoding]]) -> None:
    compact, enc = pair["o200k_base"]
    text = "word " * (SLICE * 10)
    steps = compact.steps(text)
    pauses = 0
    with pytest.raises(StopIteration) as done:
        while True:
            next(steps)
            pauses += 1
    assert pauses >= len(text) // (2 * CHUNK)  # about every SLICE pieces, whole windows at a time
    assert done.value.value == tiktoken_count(enc, text) == run(compact.steps(text))


def test_an_estimate_on_the_event_loop_lets_other_work_run(pair: dict[str, tuple[CompactBpe, tiktoken.Encoding]]
                                                          ) -> None:
    est = Estimator(engine="compact")
    long_prompt = {"messages": [{"role": "user", "content": "lorem ipsum dolor " * 20_000}]
                   + [{"role": "user", "content": "hi"}] * 500}

    async def main() -> tuple[int, int]:
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        got = await est.settle(None, est.prompt_steps("chat", None, long_prompt, est.tally()))
        done.set()
        await task
        return got, ticks

    got, ticks = asyncio.run(main())
    _, enc = pair["o200k_base"]
    assert got == est.prompt_tokens("chat", None, long_prompt)
    assert got == 3 + 1 + tiktoken_count(enc, "lorem ipsum dolor " * 20_000) + 500 * (3 + 1 + 1) + 3
    # 360,000 characters paused about every SLICE pieces (whole windows of CHUNK characters),
    # 500 short messages every 64: the ticker ran between them (not at all without pauses).
    assert ticks >= 360_000 // (3 * CHUNK) + 500 // 64


MEMORY = r"""
import gc, sys
from proxy.metering.estimate.estimator import Estimator
def rss():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS")) / 1024
est = Estimator("cl100k_base", [(["o200k"], "o200k_base")], engine=sys.argv[1])
est.count_text(None, "warm up imports and the interpreter's own allocations with cl100k")
gc.collect()
before = rss()
est.count_text("o200k", "hello world")
gc.collect()
print(rss() - before)
"""


def test_the_compact_o200k_costs_a_fraction_of_tiktokens_memory(tmp_path: Path) -> None:
    def cost(engine: str) -> float:
        env = {"TIKTOKEN_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
        done = subprocess.run([sys.executable, "-c", MEMORY, engine], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return float(done.stdout)

    compact, tiktoken_mb = cost("compact"), cost("tiktoken")
    assert compact < 10, compact  # 7.6 MB measured: the arrays' 6.9 and little else
    assert tiktoken_mb > 3 * compact, (compact, tiktoken_mb)
