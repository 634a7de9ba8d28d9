"""What an upstream's chat template adds to a prompt, learnt from the calls where it reports usage.

An estimate counts a prompt by OpenAI's recipe, but a self-hosted server wraps each message
in its own template: llama.cpp counts 36 tokens for a prompt the recipe counts as 13. Where
the same upstream, model and endpoint report usage on other calls (llama.cpp does on plain
calls, never on streams), the difference between its count and the recipe's is that
overhead; the median of the last `WINDOW` differences is added to later estimates, which are
flagged `estimate_calibrated`. The median shrugs off an odd call (a long tool schema, a
cached prefix). Memory is bounded: `WINDOW` integers per key, at most `MAX_KEYS` keys, the
least recently used forgotten first. Each process learns on its own.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass
from statistics import median_low

WINDOW = 32  # reported calls kept per upstream, model and endpoint
MIN_SAMPLES = 3  # an overhead learnt from fewer is not applied
MAX_KEYS = 512  # upstream, model and endpoint triples remembered
SAMPLE_EVERY = 64  # once a window is full, one reported call in this many keeps it current
CALIBRATED = "estimate_calibrated"

Key = tuple[str, str, str]  # upstream, model, endpoint


@dataclass(frozen=True, slots=True)
class Overhead:
    tokens: int  # to add to a prompt estimate (may be negative)
    samples: int  # the reported calls it rests on


class Calibration:
    def __init__(self, window: int = WINDOW, min_samples: int = MIN_SAMPLES, max_keys: int = MAX_KEYS) -> None:
        self.window, self.min_samples, self.max_keys = window, min_samples, max_keys
        self._diffs: OrderedDict[Key, deque[int]] = OrderedDict()
        self._seen: dict[Key, int] = {}  # reported calls offered per key, for sampling a full window

    def wants(self, key: Key) -> bool:
        """Whether a reported call of `key` is worth counting: only keys that were estimated
        (a hosted API that always reports usage costs nothing here), and once a window is
        full, one call in SAMPLE_EVERY."""
        diffs = self._diffs.get(key)
        if diffs is None:
            return False
        if len(diffs) < self.window:
            return True
        n = self._seen[key] = self._seen.get(key, 0) + 1
        return n % SAMPLE_EVERY == 0

    def estimated(self, key: Key, learn: bool = True) -> Overhead | None:
        """An estimate of `key` is being made: remember to learn from its reported calls (with
        `learn`), and return the overhead to add, if enough is known."""
        diffs = self._diffs.get(key)
        if diffs is None:
            if not learn:
                return None
            diffs = self._diffs[key] = deque(maxlen=self.window)
            while len(self._diffs) > self.max_keys:
                old, _ = self._diffs.popitem(last=False)
                self._seen.pop(old, None)
        self._diffs.move_to_end(key)
        if len(diffs) < self.min_samples:
            return None
        return Overhead(median_low(diffs), len(diffs))

    def learn(self, key: Key, reported: int, counted: int) -> None:
        """A reported call: the upstream counted `reported` prompt tokens where the recipe counts `counted`."""
        diffs = self._diffs.get(key)
        if diffs is not None:
            diffs.append(reported - counted)
