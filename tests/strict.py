"""Skipping a test for want of the environment, except where skips are not allowed.

A CI run that must prove everything sets LLMMETER_STRICT_TESTS=1: there, a missing
prerequisite fails the test instead of skipping it quietly.
"""

from __future__ import annotations

import os

import pytest

STRICT_ENV = "LLMMETER_STRICT_TESTS"


def strict() -> bool:
    return os.environ.get(STRICT_ENV) == "1"


def require(condition: bool, reason: str) -> None:
    """Skip the calling test unless `condition`; under LLMMETER_STRICT_TESTS=1, fail it."""
    if condition:
        return
    if strict():
        pytest.fail(f"{reason} ({STRICT_ENV}=1 turns this skip into a failure)")
    pytest.skip(f"SKIPPED, NOT PASSED: {reason} (set {STRICT_ENV}=1 to make this a failure)")
