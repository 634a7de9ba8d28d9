"""Calibration of estimates by the upstream's own reports (proxy/metering/estimate/calibration.py):
a robust median over a bounded window, learnt only for what is estimated, in bounded memory."""

from __future__ import annotations

from proxy.metering.estimate.calibration import MAX_KEYS, Calibration, Overhead

KEY = ("selfhosted", "smollm2", "chat")


def test_nothing_is_learnt_for_what_is_never_estimated() -> None:
    c = Calibration()
    assert not c.wants(KEY)  # a hosted API that always reports usage costs no count
    c.learn(KEY, 36, 13)
    assert c.estimated(KEY) is None  # the first estimate: nothing known yet, but now wanted
    assert c.wants(KEY)


def test_the_median_of_the_window_and_at_least_three_reports() -> None:
    c = Calibration(window=5)
    c.estimated(KEY)
    c.learn(KEY, 36, 13)
    c.learn(KEY, 40, 17)
    assert c.estimated(KEY) is None  # two reports are not enough
    c.learn(KEY, 900, 13)  # an odd call (a cached prefix, a tool schema) does not move the median
    assert c.estimated(KEY) == Overhead(23, 3)
    for _ in range(5):
        c.learn(KEY, 20, 10)
    assert c.estimated(KEY) == Overhead(10, 5)  # only the last five count


def test_memory_is_bounded_least_recently_used_first() -> None:
    c = Calibration()
    for i in range(MAX_KEYS + 10):
        c.estimated(("u", f"m{i}", "chat"))
    assert not c.wants(("u", "m0", "chat")) and c.wants(("u", f"m{MAX_KEYS + 9}", "chat"))
    assert len(c._diffs) == MAX_KEYS


def test_an_estimate_after_a_departure_starts_no_learning() -> None:
    """A hosted API that always reports usage, whose clients sometimes leave mid-stream: its
    reported calls are never counted (that count cost a thread hop on every eighth call)."""
    c = Calibration()
    key = ("moonshot", "kimi-k3.1-pro", "chat")
    assert c.estimated(key, learn=False) is None
    assert not c.wants(key)
    c.estimated(key)  # an answer that came whole without usage: now it learns
    assert c.wants(key)
