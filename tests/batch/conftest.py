"""A running llmmeter in front of the batch upstream, with batch prices for the test models."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.batch.upstream import BatchUpstream
from tests.serve import Served

# USD per million tokens: the test models' batch tiers (half their standard prices, as providers do).
BATCH_PRICES = """
[[price]]
model = "gpt-test"
tier = "batch"
effective_from = 2026-01-01T00:00:00Z
input = "0.75"
output = "3.00"
cache_read = "0.075"
cache_write = "0.9375"
source = "test fixture"

[[price]]
model = "claude-batch-test"
match = ["claude-batch-test"]
tier = "standard"
effective_from = 2026-01-01T00:00:00Z
input = "3.00"
output = "15.00"
cache_read = "0.30"
cache_write = "3.75"
source = "test fixture"

[[price]]
model = "claude-batch-test"
tier = "batch"
effective_from = 2026-01-01T00:00:00Z
input = "1.50"
output = "7.50"
cache_read = "0.15"
cache_write = "1.875"
source = "test fixture"
"""


@pytest.fixture
def batch_upstream() -> Iterator[BatchUpstream]:
    with BatchUpstream() as up:
        yield up


@pytest.fixture
def meter_for(tmp_path: Path, prices_dir: Path) -> Iterator[Callable[..., Served]]:
    """meter_for(upstream_url, public=True, server="", extra="") -> a started llmmeter whose one upstream
    is named "openai"; with `public`, server.public_url is its own address; `extra` is more TOML."""
    (prices_dir / "batch-test.toml").write_text(BATCH_PRICES)
    started: list[Served] = []

    def start(upstream_url: str, public: bool = True, server: str = "", extra: str = "", **kw: Any) -> Served:
        workdir = tmp_path / f"llmmeter{len(started)}"
        workdir.mkdir()
        s = Served(workdir, config="", args=("--prices", str(prices_dir)), **kw)
        public_url = f'public_url = "{s.url}"\n' if public else ""
        (workdir / "llmmeter.toml").write_text(
            f'[server]\n{public_url}{server}\n[[upstream]]\nname = "openai"\nbase_url = "{upstream_url}/v1"\n\n'
            + extra)
        started.append(s)
        return s.start()

    yield start
    for s in started:
        s.stop()
