"""Replicas whose wall clocks are off: `llmmeter serve` processes started with
tests/budget/skewed_clock/sitecustomize.py on their PYTHONPATH."""

from __future__ import annotations

import os
from pathlib import Path

SKEW_DIR = Path(__file__).parent / "skewed_clock"


def skewed_env(seconds: float) -> dict[str, str]:
    """The environment that shifts a served process's time.time by `seconds`."""
    path = os.pathsep.join(p for p in (str(SKEW_DIR), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "SKEWED_CLOCK_S": str(seconds)}
