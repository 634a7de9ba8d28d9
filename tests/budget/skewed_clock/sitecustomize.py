"""Put on PYTHONPATH, this shifts the process's wall clock (time.time, time.time_ns) by the
SKEWED_CLOCK_S environment variable's seconds: a replica whose host clock is off, for the budget
tests (tests/budget/test_clock_skew.py). Python imports `sitecustomize` at start-up, before
any of llmmeter's modules, so every `time.time` they take is the shifted one."""

import os
import time

_SKEW_S = float(os.environ.get("SKEWED_CLOCK_S", "0"))
_time, _time_ns = time.time, time.time_ns


def _skewed() -> float:
    return _time() + _SKEW_S


def _skewed_ns() -> int:
    return _time_ns() + int(_SKEW_S * 1_000_000_000)


time.time = _skewed
time.time_ns = _skewed_ns
