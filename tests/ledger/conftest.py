"""Ledger test fixtures: real SQLite files in tmp_path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.ledger import Ledger


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'data' / 'ledger.db'}"


@pytest.fixture
def ledgers() -> Iterator[list[Ledger]]:
    """Ledgers a test starts are closed after it, even when it fails."""
    made: list[Ledger] = []
    yield made
    for ledger in made:
        ledger.close(timeout=1)
