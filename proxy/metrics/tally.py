"""Per-request counters and histograms kept in plain Python objects, exported at scrape time.

prometheus_client's `labels(...).inc()` validates labels and takes a lock on every call;
a request made ~16 such calls, a fifth of the relay's Python time (cProfile). Here the
event loop, the only writer, calls an adder bound to one series' cell: no label lookup,
no lock. A scrape copies what it reads (one C-level call each, so no update is seen half
done) and renders the same samples prometheus_client would: `_total` and `_created` for
counters; `_bucket`, `_count`, `_sum` and `_created` for histograms, `le` spelt as
prometheus_client spells it; a series never updated (nor zeroed) is not exported.

With several workers (`--workers`), the values must live in prometheus_client's shared
files instead: given a registry, the adders update a real metric's child.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

Key = tuple[str, ...]


class _Cell:
    """One counter series in one process; `add` is bound once per label combination."""

    __slots__ = ("touched", "value")

    def __init__(self) -> None:
        self.value, self.touched = 0.0, False  # untouched: not exported, as prometheus_client does

    def add(self, n: float = 1.0) -> None:
        self.value += n
        self.touched = True


class _Row:
    """One histogram series in one process: counts per bucket (not cumulative), then the sum."""

    __slots__ = ("bounds", "counts")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0.0] * (len(bounds) + 1)

    def observe(self, value: float) -> None:
        counts = self.counts
        counts[bisect_left(self.bounds, value)] += 1
        counts[-1] += value


class Sum:
    """A counter family. `adder(key)` (key = the label values in order) gives the callable that
    adds to that series: the metrics keep one per label combination, so a request's update is
    one call, with no label lookup."""

    def __init__(self, name: str, doc: str, labels: Sequence[str], registry: CollectorRegistry | None) -> None:
        self.name, self.doc, self.labelnames = name, doc, tuple(labels)
        self.values: dict[Key, _Cell] = {}
        self.created: dict[Key, float] = {}
        self._shared = Counter(name, doc, labels, registry=registry) if registry is not None else None

    def adder(self, key: Key) -> Callable[[float], None]:
        if self._shared is not None:
            return _lazy(self._shared, key, "inc")
        cell = self.values.get(key)
        if cell is None:
            self.created[key] = time.time()
            cell = self.values[key] = _Cell()
        return cell.add

    def zero(self, key: Key) -> None:
        """Exports `key` at 0 before its first increment, so increase() sees that step."""
        if self._shared is not None:
            self._shared.labels(*key)  # a child is written to the shared files at 0
            return
        self.adder(key)(0.0)

    def family(self) -> Metric:
        fam = CounterMetricFamily(self.name, self.doc, labels=self.labelnames)
        created = dict(self.created)
        for key, cell in list(self.values.items()):
            if cell.touched:
                fam.add_metric(key, cell.value, created=created.get(key))
        return fam


class Buckets:
    """A histogram family; `observer(key)` as Sum's `adder`."""

    def __init__(self, name: str, doc: str, labels: Sequence[str], bounds: Sequence[float],
                 registry: CollectorRegistry | None) -> None:
        self.name, self.doc, self.labelnames = name, doc, tuple(labels)
        self.bounds = (*sorted(float(b) for b in bounds), float("inf"))
        self._le = tuple(floatToGoString(b) for b in self.bounds)  # type: ignore[no-untyped-call]
        self.values: dict[Key, _Row] = {}
        self.created: dict[Key, float] = {}
        self._shared = Histogram(name, doc, labels, buckets=bounds, registry=registry) \
            if registry is not None else None

    def observer(self, key: Key) -> Callable[[float], None]:
        if self._shared is not None:
            return _lazy(self._shared, key, "observe")
        row = self.values.get(key)
        if row is None:
            self.created[key] = time.time()
            row = self.values[key] = _Row(self.bounds)
        return row.observe

    def family(self) -> Metric:
        fam = HistogramMetricFamily(self.name, self.doc, labels=self.labelnames)
        created = dict(self.created)
        for key, row in list(self.values.items()):
            counts = list(row.counts)  # one C-level copy: no half-done update
            if not any(counts[:-1]):
                continue  # never observed
            cumulative, buckets = 0.0, []
            for le, n in zip(self._le, counts, strict=False):
                cumulative += n
                buckets.append((le, cumulative))
            fam.add_metric(key, buckets, counts[-1])
            if key in created:
                fam.samples.append(Sample(self.name + "_created", dict(zip(self.labelnames, key, strict=True)),
                                          created[key]))
        return fam


def _lazy(metric: Counter | Histogram, key: Key, method: str) -> Callable[[float], None]:
    """With several workers: the shared child is made on the first update, so a series that is
    never updated never appears (creating a child writes a 0 to the shared files)."""
    child: list[Any] = []

    def update(n: float = 1.0) -> None:
        if not child:
            child.append(getattr(metric.labels(*key), method))
        child[0](n)

    return update


class Tally(Collector):
    """Exports the dict-kept families of one process (not registered when they are shared)."""

    def __init__(self, families: Iterable[Sum | Buckets]) -> None:
        self.families = tuple(families)

    def collect(self) -> Iterable[Metric]:
        for f in self.families:
            yield f.family()


class Level:
    """A gauge the event loop moves by one (`inc`, `dec`). In one process it is a plain int that
    the gauge reads at scrape time (prometheus_client's own `inc` checks and takes a lock on
    every call: 1.0-1.8 µs a request for the pair); with several workers it is the shared
    gauge itself, summed over the live workers."""

    __slots__ = ("_gauge", "value")

    def __init__(self, name: str, doc: str, registry: CollectorRegistry, shared: bool) -> None:
        self.value = 0
        gauge = Gauge(name, doc, registry=registry, multiprocess_mode="livesum")
        self._gauge = gauge if shared else None
        if not shared:
            gauge.set_function(self._read)

    def _read(self) -> float:
        return float(self.value)

    def inc(self) -> None:
        if self._gauge is not None:
            self._gauge.inc()
        else:
            self.value += 1

    def dec(self) -> None:
        if self._gauge is not None:
            self._gauge.dec()
        else:
            self.value -= 1
