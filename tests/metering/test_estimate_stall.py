"""What one estimate may cost: pathological bodies neither stall the event loop nor lose
the record; ordinary texts stay exact; past its bound a count is approximated and flagged."""

from __future__ import annotations

import asyncio
import json
import string
import threading
import time
from collections.abc import Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import tiktoken
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from pricing import PriceBook, default_tables_dir, load_dir
from proxy.ledger.record import Record
from proxy.metering.estimate.estimator import (
    APPROXIMATED,
    COUNTER_FAILED,
    ENGINES,
    SUPPORTED_ENCODINGS,
    Estimator,
    Tally,
    TiktokenCounter,
    measure,
    run,
)
from proxy.metering.meter import Exchange, Meter
from proxy.metrics.metrics import Metrics
from proxy.protocol.usage import Observed
from proxy.settings import Settings, Workloads
from tests.fake_upstream import FakeUpstream

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")

PATHOLOGICAL = {
    "a million spaces": " " * 1_000_000,  # tiktoken 0.14 panics on it uncut
    "a megabyte of one letter": "a" * (1 << 20),
    "a megabyte of letters without a space": "".join(string.ascii_lowercase[i * 7 % 26] for i in range(1 << 20)),
    "four megabytes of one character": "\u00e9" * (4 << 20),
}


@pytest.fixture(scope="module")
def tiktoken_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path_factory.mktemp("tiktoken")))
        yield


@pytest.fixture(scope="module", params=ENGINES)
def est(request: pytest.FixtureRequest, tiktoken_cache: None) -> Iterator[Estimator]:
    e = Estimator(engine=request.param)
    for name in SUPPORTED_ENCODINGS:
        e.load(name)
    yield e
    e.close()


@pytest.fixture(scope="module")
def encodings(tiktoken_cache: None) -> dict[str, tiktoken.Encoding]:
    Estimator().load("o200k_base")  # unpacks into the cache without the network
    Estimator().load("cl100k_base")
    return {name: tiktoken.get_encoding(name) for name in SUPPORTED_ENCODINGS}


def prose() -> str:
    return "\n".join(p.read_text() for p in sorted([*ROOT.glob("*.md"), *ROOT.glob("proxy/**/*.py")]))


async def longest_gap(work: Generator[None, None, T], est: Estimator) -> tuple[T, float]:
    """Settle `work` while a ticker notes the longest wait between two of its turns."""
    gap, done = 0.0, False

    async def ticker() -> None:
        nonlocal gap
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gap, last = max(gap, now - last), now

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    got = await est.settle(None, work)
    done = True
    await task
    return got, gap


@pytest.mark.parametrize("name", PATHOLOGICAL)
def test_a_pathological_body_leaves_the_loop_responsive(est: Estimator, name: str) -> None:
    text = PATHOLOGICAL[name]
    tally = est.tally()
    body = {"messages": [{"role": "user", "content": text}]}
    got, gap = asyncio.run(longest_gap(est.prompt_steps("chat", None, body, tally), est))
    # Generous: the old compact counter held the loop ~0.3 s per megabyte of one piece.
    assert gap < 0.5, gap
    assert tally.approximated and APPROXIMATED in tally.flags
    assert COUNTER_FAILED not in tally.flags  # cut before tiktoken could panic
    assert got > 7


def test_a_body_of_many_tiny_messages_leaves_the_loop_responsive(est: Estimator) -> None:
    body = {"messages": [{"role": "user", "content": "a"} for _ in range(200_000)]}
    tally = est.tally()
    got, gap = asyncio.run(longest_gap(est.prompt_steps("chat", None, body, tally), est))
    assert gap < 0.5, gap  # read lazily and paused every 64 messages, on the loop or off it
    assert got == 200_000 * (3 + 1 + 1) + 3  # within the budget: exact
    assert tally.flags == ()


def test_a_forced_cut_counts_close_to_tiktoken(encodings: dict[str, tiktoken.Encoding]) -> None:
    est = Estimator()
    for text in ("a" * (1 << 20), "".join(string.ascii_lowercase[i * 7 % 26] for i in range(300_000))):
        tally = est.tally()
        got = est.count_text(None, text, tally)
        exact = len(encodings["o200k_base"].encode_ordinary(text))
        assert tally.approximated
        assert abs(got - exact) <= exact / 100, (got, exact)


def test_ordinary_long_texts_are_exact_and_unflagged(est: Estimator, encodings: dict[str, tiktoken.Encoding]) -> None:
    text = prose() * 2  # many segments, every cut where tiktoken ends a piece anyway
    assert len(text) > 20 * TiktokenCounter.segment
    for name in SUPPORTED_ENCODINGS:
        tally = est.tally()
        model = "gpt-4" if name == "cl100k_base" else None
        counted = Estimator(name, engine=est.engine).count_text(model, text, tally)
        assert counted == len(encodings[name].encode_ordinary(text)), name
        assert tally.flags == ()


def test_past_the_budget_the_rest_is_approximated_from_the_counted_ratio(
        encodings: dict[str, tiktoken.Encoding]) -> None:
    page = prose()[:40_000]
    text = page * 10  # the same ratio all along: the counted part predicts the rest
    exact = len(encodings["o200k_base"].encode_ordinary(text))
    est = Estimator(exact_chars=2 * len(page))
    tally = est.tally()
    got = est.prompt_tokens("chat", None, {"messages": [{"role": "user", "content": text}] * 3}, tally)
    assert tally.flags == (APPROXIMATED,)
    assert tally.chars < 2 * len(page) + TiktokenCounter.segment  # counted no further than the budget
    assert abs(got - (3 * exact + 3 * 4 + 3)) < 3 * exact / 100


def test_a_tiktoken_panic_is_caught_and_approximated(encodings: dict[str, tiktoken.Encoding]) -> None:
    counter = TiktokenCounter(encodings["o200k_base"])
    counter.segment = 2_000_000  # no cut: tiktoken gets the whole run, and panics
    tally = Tally()
    got = run(measure(counter, "hello world" + " " * 1_000_000, tally))  # PanicException is a BaseException
    assert tally.flags == (APPROXIMATED, COUNTER_FAILED)
    assert got == 250_003  # nothing counted before it: a quarter of a token per character


class Kept:
    def __init__(self) -> None:
        self.records: list[Record] = []

    def append(self, record: Record) -> None:
        self.records.append(record)


def test_the_record_of_a_pathological_request_is_estimated_and_flagged(tiktoken_cache: None) -> None:
    book = PriceBook(load_dir(default_tables_dir()), {})
    kept, est = Kept(), Estimator()
    meter = Meter(book, est, Workloads(), kept, Metrics(Settings(), book, CollectorRegistry()))
    ex = Exchange(start=datetime.now(UTC), t0=time.perf_counter(), endpoint="chat", tenant="t", code=200)
    ex.model_requested = "kimi-k3.1-pro"
    ex.request = {"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": " " * 1_000_000}]}
    rec = asyncio.run(meter.finish(ex, Observed(), lambda: "fine, thanks"))
    assert kept.records == [rec]
    assert rec.usage_source == "estimated"
    assert APPROXIMATED in rec.flags
    assert rec.input_tokens > 0 and rec.output_tokens == 3
    est.close()


# --- the cuts against tiktoken itself -------------------------------------------------

PARTS = ["don't", "WE'LL", "it's", " ", "   ", "\n", "\r\n", "\t", "a", "Ab", "ABC", "12345", "'", "'s", "/",
         "?!", " x", "é", "日本", "😀", "\n\n  ", "x" * 40, "a\u0301", "٣٤", "\u00a0", "\u3000", "\ud83d",
         "\ude00", '{"k":1}', "-", "_", "$", "\u1680", "\x1c"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.sampled_from(PARTS), st.text(max_size=8)), max_size=60),
       st.integers(min_value=6, max_value=40))
def test_cut_segments_sum_to_tiktokens_count(encodings: dict[str, tiktoken.Encoding], parts: list[str],
                                             segment: int) -> None:
    text = "".join(parts)
    for enc in encodings.values():
        counter = TiktokenCounter(enc)
        counter.segment = segment  # tiny segments: a cut every few characters
        tally = Tally()
        got = run(measure(counter, text, tally))
        if not tally.approximated:  # no forced cut: must be exact
            assert got == len(enc.encode_ordinary(text)), (enc.name, text, segment)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.sampled_from(PARTS), st.text()), min_size=1, max_size=400))
def test_every_engine_agrees_with_tiktoken_on_ordinary_text(est: Estimator, encodings: dict[str, tiktoken.Encoding],
                                                            parts: list[str]) -> None:
    text = "".join(parts)
    tally = est.tally()
    assert est.count_text(None, text, tally) == len(encodings["o200k_base"].encode_ordinary(text))
    assert tally.flags == ()


# --- end to end: a real llmmeter, a real fake upstream --------------------------------


def test_other_clients_are_served_while_a_pathological_body_is_estimated(fake: FakeUpstream, serve: Any) -> None:
    proxy = serve(upstream=fake.base_url)
    ordinary = {"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": "hi"}]}
    usage = {"x-fake-usage": json.dumps({"prompt": 5, "completion": 4})}
    with httpx.Client(base_url=proxy.base_url, timeout=30) as client:
        client.post("/chat/completions", json=ordinary, headers=usage)  # warm: vocabulary-free path
        pathological = {**ordinary, "messages": [{"role": "user", "content": "a" * (8 << 20)}]}
        waits: list[float] = []
        finished = threading.Event()

        def ordinary_client() -> None:
            with httpx.Client(base_url=proxy.base_url, timeout=30) as other:
                while not finished.is_set() or len(waits) < 20:
                    t = time.perf_counter()
                    assert other.post("/chat/completions", json=ordinary, headers=usage).status_code == 200
                    waits.append(time.perf_counter() - t)

        with ThreadPoolExecutor(1) as pool:
            others = pool.submit(ordinary_client)
            started = time.perf_counter()
            big = client.post("/chat/completions", json=pathological, headers={"x-fake-no-usage": "1"})
            big_s = time.perf_counter() - started
            finished.set()
            others.result()
    assert big.status_code == 200
    # The old counter held the loop for most of the big request's time, so an ordinary call waited
    # about that long. Measured against the big request, not a clock: a loaded machine slows both.
    assert max(waits) < max(1.0, big_s / 2), (max(waits), big_s)
    rows = proxy.rows(expect=2 + len(waits))
    [row] = [r for r in rows if r["usage_source"] == "estimated"]
    assert APPROXIMATED in row["flags"].split(",")
    assert row["input_tokens"] > (8 << 20) // 10
