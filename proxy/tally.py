"""Per-request counters and histograms kept in plain dicts, exported at scrape time.

prometheus_client's `labels(...).inc()` validates labels and takes a lock on every call;
a request made ~16 such calls, a fifth of the relay's Python time (cProfile). Here the
event loop, the only writer, adds to a dict entry; a scrape copies the dicts first (one
C-level call each, so no update is seen half done) and renders the same samples
prometheus_client would: `_total` and `_created` for counters; `_bucket`, `_count`, `_sum`
and `_created` for histograms, `le` spelt as prometheus_client spells it.

With several workers (`--workers`), the values must live in prometheus_client's shared
files instead: `shared=True` passes every update on to a real metric's child.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

Key = tuple[str, ...]


class Sum:
    """A counter family: `inc(key, n)`, key = the label values in order."""

    def __init__(self, name: str, doc: str, labels: Sequence[str], registry: CollectorRegistry | None) -> None:
        self.name, self.doc, self.labelnames = name, doc, tuple(labels)
        self.values: dict[Key, float] = {}
        self.created: dict[Key, float] = {}
        self._shared = Counter(name, doc, labels, registry=registry) if registry is not None else None
        self._kids: dict[Key, Any] = {}

    def inc(self, key: Key, n: float = 1.0) -> None:
        if self._shared is not None:
            kid = self._kids.get(key)
            if kid is None:
                kid = self._kids[key] = self._shared.labels(*key)
            kid.inc(n)
            return
        values = self.values
        old = values.get(key)
        if old is None:
            self.created[key] = time.time()
            values[key] = float(n)
        else:
            values[key] = old + n

    def family(self) -> Metric:
        fam = CounterMetricFamily(self.name, self.doc, labels=self.labelnames)
        created = dict(self.created)
        for key, value in list(self.values.items()):
            fam.add_metric(key, value, created=created.get(key))
        return fam


class Buckets:
    """A histogram family: `observe(key, value)`."""

    def __init__(self, name: str, doc: str, labels: Sequence[str], bounds: Sequence[float],
                 registry: CollectorRegistry | None) -> None:
        self.name, self.doc, self.labelnames = name, doc, tuple(labels)
        self.bounds = (*sorted(float(b) for b in bounds), float("inf"))
        self._le = tuple(floatToGoString(b) for b in self.bounds)  # type: ignore[no-untyped-call]
        # key -> [count per bucket (not cumulative)..., sum]
        self.values: dict[Key, list[float]] = {}
        self.created: dict[Key, float] = {}
        self._shared = Histogram(name, doc, labels, buckets=bounds, registry=registry) \
            if registry is not None else None
        self._kids: dict[Key, Any] = {}

    def observe(self, key: Key, value: float) -> None:
        if self._shared is not None:
            kid = self._kids.get(key)
            if kid is None:
                kid = self._kids[key] = self._shared.labels(*key)
            kid.observe(value)
            return
        row = self.values.get(key)
        if row is None:
            self.created[key] = time.time()
            row = self.values[key] = [0.0] * (len(self.bounds) + 1)
        row[bisect_left(self.bounds, value)] += 1
        row[-1] += value

    def family(self) -> Metric:
        fam = HistogramMetricFamily(self.name, self.doc, labels=self.labelnames)
        created = dict(self.created)
        for key, row in list(self.values.items()):
            row = list(row)
            cumulative, buckets = 0.0, []
            for le, n in zip(self._le, row, strict=False):
                cumulative += n
                buckets.append((le, cumulative))
            fam.add_metric(key, buckets, row[-1])
            if key in created:
                fam.samples.append(Sample(self.name + "_created", dict(zip(self.labelnames, key, strict=True)),
                                          created[key]))
        return fam


class Tally(Collector):
    """Exports the dict-kept families of one process (not registered when they are shared)."""

    def __init__(self, families: Iterable[Sum | Buckets]) -> None:
        self.families = tuple(families)

    def collect(self) -> Iterable[Metric]:
        for f in self.families:
            yield f.family()
