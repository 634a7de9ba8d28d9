"""The lock (requirements/*.txt, written by `make lock`) agrees with pyproject.toml's ranges.

`make` installs llmmeter itself with --no-deps, so a dependency added to pyproject.toml
without `make lock` would silently be missing: these tests catch that, and a pin outside
its range, a pin without hashes, or the runtime lock drifting from the test lock.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9._-]+)==(\S+?)(?: ; (.+?))? \\\n((?:\s+--hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)",
                 re.MULTILINE)


def pins(name: str) -> dict[str, str]:
    text = (REPO / "requirements" / name).read_text()
    found: dict[str, str] = {canonicalize_name(m.group(1)): m.group(2) for m in PIN.finditer(text)}
    listed = [line for line in text.splitlines() if re.match(r"^[A-Za-z0-9]", line)]
    assert len(found) == len(listed), f"{name}: a pin without hashes among {listed}"
    return found


def requirements(*extras: str) -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    listed = project["project"]["dependencies"] + project["build-system"]["requires"]
    for extra in extras:
        listed += project["project"]["optional-dependencies"][extra]
    return [Requirement(r) for r in listed]


def check(lock: dict[str, str], reqs: list[Requirement]) -> None:
    for req in reqs:
        if req.marker is not None and not req.marker.evaluate():
            continue
        name = canonicalize_name(req.name)
        assert name in lock, f"{req} is not in the lock: run `make lock`"
        assert req.specifier.contains(lock[name], prereleases=True), f"{name}=={lock[name]} is outside {req}"


def test_runtime_lock_pins_every_runtime_requirement() -> None:
    check(pins("runtime.txt"), requirements())


def test_test_lock_pins_everything_make_test_installs() -> None:
    check(pins("test.txt"), requirements("test", "docs"))


def test_runtime_lock_is_the_test_lock_less_the_extras() -> None:
    runtime, full = pins("runtime.txt"), pins("test.txt")
    assert {n: full.get(n) for n in runtime} == runtime
