"""Ledger test fixtures: real SQLite files in tmp_path, and real PostgreSQL databases.

`db_url` runs each test on both backends; `@pytest.mark.sqlite_only` keeps a test that
reads SQLite's own file or pragmas to SQLite.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.ledger import Ledger
from proxy.ledger.store import is_postgresql
from tests.pg import PgCluster

BACKENDS = ("sqlite", "postgresql")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "sqlite_only: the test checks SQLite itself; not run on PostgreSQL")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "db_url" in metafunc.fixturenames:
        only = metafunc.definition.get_closest_marker("sqlite_only")
        metafunc.parametrize("db_url", BACKENDS[:1] if only else BACKENDS, indirect=True)


@pytest.fixture
def db_url(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'data' / 'ledger.db'}"
    # A PostgreSQL ledger journals under ./data/journal: here the same place as SQLite's.
    monkeypatch.chdir(tmp_path)
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def other_db_url(db_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A second, empty ledger on db_url's backend."""
    if not is_postgresql(db_url):
        yield f"sqlite:///{tmp_path / 'other' / 'ledger.db'}"
        return
    cluster: PgCluster = request.getfixturevalue("pg_cluster")
    url = cluster.create_database()
    yield url
    cluster.drop_database(url)


@pytest.fixture
def ledgers() -> Iterator[list[Ledger]]:
    """Ledgers a test starts are closed after it, even when it fails."""
    made: list[Ledger] = []
    yield made
    for ledger in made:
        ledger.close(timeout=1)
