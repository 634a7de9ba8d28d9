"""Shared fixtures: a real fake upstream server and real `llmmeter serve` processes."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from pricing import default_tables_dir
from tests.fake_upstream import FakeUpstream
from tests.serve import Served
from tests.strict import STRICT_ENV

DATA = Path(__file__).parent / "data"

# Property tests explore new inputs on every run where people develop. A run that must prove
# what is submitted (LLMMETER_STRICT_TESTS=1, as in CI) draws the same examples every time, so
# it passes or fails on the code alone; inputs a random run found stay as @example cases.
# Loaded here, before test modules build their own settings objects on top of it.
settings.register_profile("strict", derandomize=True, database=None)
if os.environ.get(STRICT_ENV) == "1":
    settings.load_profile("strict")
pytest_plugins = ("tests.pg",)  # pg_cluster, pg_url, ledger_db: a real PostgreSQL for the tests


@pytest.fixture
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as upstream:
        yield upstream


@pytest.fixture
def prices_dir(tmp_path: Path) -> Path:
    """The shipped tables plus the test suite's own models."""
    d = tmp_path / "prices"
    d.mkdir()
    for table in default_tables_dir().iterdir():
        if table.name.endswith(".toml"):
            (d / table.name).write_bytes(table.read_bytes())
    shutil.copy(DATA / "prices" / "test-models.toml", d)
    return d


@pytest.fixture
def serve(tmp_path: Path, prices_dir: Path) -> Iterator[Callable[..., Served]]:
    """Factory: serve(upstream=..., config=..., env=...) -> a started llmmeter."""
    started: list[Served] = []

    def start(upstream: str | None = None, config: str | None = None, **kw: Any) -> Served:
        args = (*kw.pop("args", ()), "--prices", str(prices_dir))
        workdir = tmp_path / f"llmmeter{len(started)}"
        workdir.mkdir()
        s = Served(workdir, upstream=upstream, config=config, args=args, **kw).start()
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()
