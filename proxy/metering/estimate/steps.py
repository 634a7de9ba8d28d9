"""Counting that may pause: a generator yields between slices and returns the count, so the
same count runs to its end at once (`run`), or in a worker thread that hands the GIL back
at every pause (`run_in_thread`)."""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import TypeVar

Steps = Generator[None, None, int]  # a count that may pause; its value is the count
T = TypeVar("T")


def run(steps: Generator[None, None, T]) -> T:
    """Drive a counting generator to its end without pausing."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


def run_in_thread(steps: Generator[None, None, T]) -> T:
    """`run`, for a worker thread: at each pause it lets go of the GIL, so an event loop
    waiting for it takes it now rather than after the 5 ms switch interval."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        time.sleep(0)
