"""Budget tests run on a real SQLite file and a real PostgreSQL database, like the ledger's."""

from tests.ledger.conftest import db_url, ledgers, other_db_url, pytest_configure, pytest_generate_tests

__all__ = ["db_url", "ledgers", "other_db_url", "pytest_configure", "pytest_generate_tests"]
